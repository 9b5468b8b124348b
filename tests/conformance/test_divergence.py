"""The documented-divergence mechanism of tests/support/swap.py (``differs``): a listed test
passes only when its body raises the listed exception; it fails when the body passes ("now
conforms") or raises another exception; parametrization, fixtures and the ``request`` fixture
reach the upstream body through the wrapper; the reason reaches the report."""

import inspect
import pathlib
import sys
import types

import pytest

from tests.support.swap import Divergence, differs, load

pytest_plugins = ["pytester"]

REASON = "the documented reason"
ROOT = pathlib.Path(__file__).resolve().parents[2]  # where tests.support imports from


def _Request():
    """What the wrapper reads of pytest's ``request`` fixture: the item's user_properties."""
    return types.SimpleNamespace(node=types.SimpleNamespace(user_properties=[]))


def _raise(exc):
    def body(*args, **kwargs):
        raise exc
    return body


def test_differs_checks_its_arguments():
    assert differs(REASON) == Divergence(REASON, AssertionError)
    assert differs(REASON, raises=(TypeError, ValueError)).raises_name == "TypeError or ValueError"
    with pytest.raises(TypeError):
        differs(REASON, raises="AssertionError")
    with pytest.raises(ValueError):
        differs("")


def test_expected_exception_passes_and_is_reported():
    request = _Request()
    test = differs(REASON).wrap(_raise(AssertionError("arrays differ")))
    test(request=request)
    assert request.node.user_properties == [("documented_divergence", REASON),
                                            ("divergence_raised", "AssertionError: arrays differ")]


def test_passing_body_fails_now_conforms():
    request = _Request()
    test = differs(REASON).wrap(lambda: None)
    with pytest.raises(pytest.fail.Exception, match="now conforms: remove it from the list"):
        test(request=request)


def test_other_exception_type_fails():
    test = differs(REASON, raises=TypeError).wrap(_raise(AssertionError("an assertion")))
    with pytest.raises(AssertionError) as info:
        test(request=_Request())
    if sys.version_info >= (3, 11):
        assert any("expected TypeError" in note for note in info.value.__notes__)


def test_skip_inside_the_body_is_a_skip():
    test = differs(REASON).wrap(lambda: pytest.skip("upstream skip"))
    with pytest.raises(pytest.skip.Exception):
        test(request=_Request())


def test_wrapper_keeps_name_marks_signature_and_documents_the_reason():
    @pytest.mark.parametrize("n", [1, 2])
    def test_upstream(self, n, tmp_path, **kwargs):
        """Upstream's docstring."""
    test = differs(REASON).wrap(test_upstream)
    assert test.__name__ == "test_upstream"
    assert [m.name for m in test.pytestmark] == ["parametrize"]
    assert list(inspect.signature(test).parameters) == ["self", "n", "tmp_path", "request",
                                                        "kwargs"]
    assert test.__doc__.startswith(f"Documented divergence (expects AssertionError): {REASON}")
    assert test.__doc__.endswith("Upstream's docstring.")

    def test_with_request(request):
        pass
    assert list(inspect.signature(differs(REASON).wrap(test_with_request)).parameters) == \
        ["request"]


UPSTREAM = """
import pytest


@pytest.fixture
def value():
    return 3


def test_a():
    assert False


class TestUpstream:
    @pytest.mark.parametrize("n", [1, 2])
    def test_overwrite(self, n, value):
        assert n + value == 0          # a documented divergence: AssertionError, both params

    def test_conforms(self):
        pass                           # listed, but passes: must fail

    def test_other_error(self):
        raise TypeError("not the listed kind")

    @pytest.mark.parametrize("n", [1, 2])
    def test_per_param(self, n, request):
        assert request.node.name       # the upstream body's own request fixture still comes
        assert n == 2                  # differs for n=1 only (applied from a fixture)
"""

RUN = """
import pytest
from tests.support.swap import differs, export, load

upstream = load("upstream_divergence_example", {}, divergences={
    "TestUpstream::test_overwrite": differs("documented overwrite"),
    "TestUpstream::test_conforms": differs("listed but conforming"),
    "TestUpstream::test_other_error": differs("expects an assertion"),
})
globals().update({k: v for k, v in export(upstream).items() if k != "test_a"})

PER_PARAM = differs("per parametrization")


@pytest.fixture(autouse=True)
def _apply(request):
    spec = getattr(request.node, "callspec", None)
    if request.node.originalname == "test_per_param" and spec.params["n"] == 1:
        PER_PARAM.apply(request.node)
    yield
"""


@pytest.fixture
def upstream_module(tmp_path, monkeypatch):
    """An "upstream" test module, importable by name as swap.load expects."""
    (tmp_path / "upstream_divergence_example.py").write_text(UPSTREAM)
    monkeypatch.syspath_prepend(tmp_path)  # invalidates the import caches too
    return "upstream_divergence_example"


def test_load_refuses_a_bare_reason_and_an_unknown_test(upstream_module):
    with pytest.raises(TypeError, match="differs"):
        load(upstream_module, {}, divergences={"test_a": "a bare reason"})
    with pytest.raises(AttributeError):
        load(upstream_module, {}, divergences={"TestUpstream::test_b": differs(REASON)})
    module = load(upstream_module, {}, divergences={"test_a": differs(REASON)})
    assert module.test_a.divergence == differs(REASON)


def test_in_a_pytest_run(pytester, upstream_module):
    """End to end in a pytest run: outcomes, parametrization and fixtures through the wrapper,
    a divergence applied per item from a fixture, the reason in the report."""
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_run=RUN)
    result = pytester.runpytest_inprocess("test_run.py", "-p", "no:cacheprovider",
                                          "-p", "no:xdist", "-o", "addopts=",
                                          f"--junitxml={pytester.path / 'out.xml'}")
    outcomes = {r.nodeid.split("::", 1)[1]: r.outcome
                for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"}
    assert outcomes == {
        "TestUpstream::test_overwrite[1]": "passed",
        "TestUpstream::test_overwrite[2]": "passed",
        "TestUpstream::test_conforms": "failed",      # listed, passes: now conforms
        "TestUpstream::test_other_error": "failed",   # listed, raises another exception
        "TestUpstream::test_per_param[1]": "passed",  # differs, applied to that item only
        "TestUpstream::test_per_param[2]": "passed",  # not listed: conforms
    }
    result.stdout.fnmatch_lines(["*_ TestUpstream.test_conforms _*",
                                 "now conforms: remove it from the list*listed but conforming)",
                                 "*_ TestUpstream.test_other_error _*"])
    result.stdout.fnmatch_lines(["*TypeError: not the listed kind"] + (
        ["*documented divergence: expected AssertionError*"] if sys.version_info >= (3, 11)
        else []))
    assert "xfail" not in result.stdout.str()
    xml = (pytester.path / "out.xml").read_text()
    assert 'name="documented_divergence" value="documented overwrite"' in xml
    assert 'name="documented_divergence" value="per parametrization"' in xml
    assert 'name="divergence_raised" value="AssertionError' in xml
