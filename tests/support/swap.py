"""Run SciPy's and scikit-learn's own test modules against gpulinalg's objects.

:func:`load` executes an upstream test module's source (it ships inside the installed package)
as a new module, then binds gpulinalg's objects to the names the tests call, so every test body
exercises gpulinalg with the upstream assertions. A conformance test file re-exports what it
loads::

    from tests.support.swap import differs, export, load
    upstream = load("scipy.linalg.tests.test_decomp_cholesky",
                    {"cholesky": decomp.cholesky, ...},
                    divergences={"TestCholesky::test_simple": differs("why it differs")})
    globals().update(export(upstream))

**Documented divergences.** An upstream test that cannot pass against gpulinalg for a
documented reason is listed with :func:`differs`: the upstream test is replaced by a wrapper
that runs the upstream body (same fixtures and parameters) and passes only when the body raises
the exception the divergence names (by default ``AssertionError``: the upstream assertion that
shows the documented difference). It *fails* when the body passes ("now conforms: remove it from
the list"), so the lists stay true, and when the body raises anything else. These are the
semantics of a strict ``xfail(raises=...)``, reported as a pass with the reason attached: the
wrapper's docstring and the test report's ``user_properties`` (``documented_divergence``: the
reason; ``divergence_raised``: the exception seen), which ``--junitxml`` writes out.

Divergences that apply per parametrization or per backend (known only once a test is
collected) use the same object through :meth:`Divergence.apply`, from a fixture, on
``request.node``. Tests that cannot apply at all (they test another library's internals) are
listed in ``skip`` instead, with the reason. docs/conformance.md gives the reasons.
"""

import dataclasses
import functools
import importlib.util
import inspect
import types

import pytest

__all__ = ["load", "export", "differs", "Divergence"]


@dataclasses.dataclass(frozen=True)
class Divergence:
    """An upstream test expected to raise ``raises`` for the documented ``reason``."""

    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...] = AssertionError

    @property
    def raises_name(self):
        kinds = self.raises if isinstance(self.raises, tuple) else (self.raises,)
        return " or ".join(k.__name__ for k in kinds)

    def check(self, body, node=None):
        """Run ``body()``: return the expected exception it raised; fail the test (pytest's
        ``Failed``) when it returns; let any other exception through with a note naming the
        divergence. ``node`` (the test item) receives the reason and the exception seen."""
        if node is not None:
            node.user_properties.append(("documented_divergence", self.reason))
        try:
            body()
        except self.raises as exc:
            if node is not None:
                node.user_properties.append(
                    ("divergence_raised", f"{type(exc).__name__}: {exc}"[:500]))
            return exc
        except Exception as exc:
            if hasattr(exc, "add_note"):  # Python >= 3.11
                exc.add_note(f"documented divergence: expected {self.raises_name} "
                             f"({self.reason}); got {type(exc).__name__}")
            raise
        pytest.fail(f"now conforms: remove it from the list of documented divergences "
                    f"(it was listed to raise {self.raises_name}: {self.reason})", pytrace=False)

    def wrap(self, fn):
        """``fn`` (an upstream test function or method) as a test that :meth:`check`\\ s it.
        The wrapper keeps ``fn``'s name, marks (parametrization) and signature, with pytest's
        ``request`` fixture added where ``fn`` does not take it, to reach the report."""
        sig = inspect.signature(fn)
        takes_request = "request" in sig.parameters
        params = list(sig.parameters.values())
        if not takes_request:
            at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
            params.insert(at, inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(fn)
        def test(*args, **kwargs):
            request = kwargs["request"] if takes_request else kwargs.pop("request")
            self.check(lambda: fn(*args, **kwargs), request.node)

        test.__signature__ = sig.replace(parameters=params)
        test.__doc__ = (f"Documented divergence (expects {self.raises_name}): {self.reason}"
                        + (f"\n\n{fn.__doc__}" if fn.__doc__ else ""))
        test.divergence = self
        return test

    def apply(self, item):
        """Make the collected test ``item`` (``request.node``, from a fixture, before its call)
        :meth:`check` its body: for divergences known only per parametrization or backend."""
        body = item.obj

        @functools.wraps(body)
        def test(*args, **kwargs):
            self.check(lambda: body(*args, **kwargs), item)

        item.obj = test


def differs(reason, raises=AssertionError):
    """A documented divergence: the upstream test must raise ``raises`` (its assertion that
    shows the difference, ``reason``), and fails once it passes (see the module's docstring)."""
    if not (isinstance(raises, type) and issubclass(raises, BaseException)) and not (
            isinstance(raises, tuple) and raises
            and all(isinstance(k, type) and issubclass(k, BaseException) for k in raises)):
        raise TypeError(f"raises must be an exception type or a tuple of them, got {raises!r}")
    if not reason:
        raise ValueError("a documented divergence needs its reason")
    return Divergence(reason, raises)


def load(module_name, replacements, divergences=None, skip=None):
    """The upstream module ``module_name`` executed afresh with ``replacements`` bound;
    ``divergences``: ``{"Class::test": differs(...)}``; ``skip``: ``{"Class::test": reason}``."""
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
    for name, divergence in (divergences or {}).items():
        if not isinstance(divergence, Divergence):
            raise TypeError(f"{name}: list a divergence with differs(reason, raises=...)")
        _replace(module, name, divergence.wrap)
    for name, reason in (skip or {}).items():
        _replace(module, name, pytest.mark.skip(reason=reason))
    return module


def _replace(module, name, transform):
    owner_name, _, attr = name.rpartition("::")
    owner = getattr(module, owner_name) if owner_name else module
    target = getattr(owner, attr)  # AttributeError: the list names a test that does not exist
    if owner_name and not isinstance(inspect.getattr_static(owner, attr), types.FunctionType):
        raise TypeError(f"{name}: a plain test method was expected")
    setattr(owner, attr, transform(target))


def export(module):
    """Every public name of ``module`` (tests, test classes, fixtures, helpers)."""
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}
