"""Sphinx configuration: pages in MyST Markdown, API from the numpydoc docstrings."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "gpulinalg"
author = "the gpulinalg developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "numpydoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
numpydoc_show_class_members = False
autodoc_mock_imports = ["cupy", "nvmath", "torch"]
html_theme = "alabaster"
