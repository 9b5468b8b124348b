"""Run SciPy's and scikit-learn's own test modules against gpulinalg's objects.

:func:`load` executes an upstream test module's source (it ships inside the installed package)
as a new module, then binds gpulinalg's objects to the names the tests call, so every test body
exercises gpulinalg with the upstream assertions. A conformance test file re-exports what it
loads::

    from tests.support.swap import load, export
    upstream = load("scipy.linalg.tests.test_decomp_cholesky",
                    {"cholesky": decomp.cholesky, ...},
                    xfail={"TestCholesky::test_simple": "why it cannot pass"})
    globals().update(export(upstream))

Tests that cannot pass for a documented reason are listed in ``xfail`` (strict: a listed test that
starts passing fails, so the list stays true); docs/conformance.md gives the reasons.
"""

import importlib.util
import types

import pytest

__all__ = ["load", "export"]


def load(module_name, replacements, xfail=None, skip=None):
    """The upstream module ``module_name`` executed afresh with ``replacements`` bound."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{module_name} is not installed", allow_module_level=True)
    with open(spec.origin, encoding="utf-8") as f:  # pytest's loader has no get_source
        source = f.read()
    module = types.ModuleType(module_name.replace(".", "_") + "_on_gpulinalg")
    module.__file__ = spec.origin
    module.__package__ = spec.parent
    exec(compile(source, spec.origin, "exec"), module.__dict__)
    module.__dict__.update(replacements)
    for name, reason in (xfail or {}).items():
        _mark(module, name, pytest.mark.xfail(reason=reason, strict=True))
    for name, reason in (skip or {}).items():
        _mark(module, name, pytest.mark.skip(reason=reason))
    return module


def _mark(module, name, mark):
    owner_name, _, attr = name.rpartition("::")
    owner = getattr(module, owner_name) if owner_name else module
    target = getattr(owner, attr)  # AttributeError: the list names a test that does not exist
    setattr(owner, attr, mark(target))


def export(module):
    """Every public name of ``module`` (tests, test classes, fixtures, helpers)."""
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}
