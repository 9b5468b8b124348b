"""gpulinalg's benchmarks: ``python -m benchmarks NAME [ARGS ...]`` (names in ``__main__``).

``suites/`` holds the published suites (their rows are the pages under ``docs/benchmarks/``) and
the modules they take rows or measurements from, ``studies/`` the one-off investigations,
``_harness.py`` what both share (peers, timing, rows, JSON, environment); ``report.py`` and
``compare.py`` read result files (``results/``). Suites import the harness and each other,
studies import the harness and suites; the harness imports neither.
"""

import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _MovedModules(importlib.abc.MetaPathFinder):
    """``benchmarks.<name>`` for the module ``suites/<name>.py`` or ``studies/<name>.py``: the
    commands ``python -m benchmarks.<name>`` of the layout before ``suites/`` and ``studies/``
    keep running (as the module's file, under the old name)."""

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or not name.isidentifier():
            return None
        for folder in ("suites", "studies"):
            file = os.path.join(_HERE, folder, name + ".py")
            if os.path.isfile(file):
                return importlib.util.spec_from_file_location(fullname, file)
        return None


if not any(type(f).__name__ == "_MovedModules" for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
