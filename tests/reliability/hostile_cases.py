"""The hostile-input matrix: every public solver-type function of gpulinalg against SciPy's
same call, over classes of unusual inputs, each case run (ours and SciPy's) in an isolated worker
process (``tests/reliability/isolation.py``) and judged by :func:`verdict`.

A case is ``(function, input class, target)``: the class transforms one operand (``a`` or
``b``) of the function's well-conditioned base problem. The verdicts: ``correct`` (a result
that agrees with SciPy's, or passes the function's own check where SciPy has no answer),
``warning`` (a result with a conditioning warning), ``clear error`` (an exception of a
documented kind with a message); anything else fails the test: a crash, a hang, an internal
exception (``AttributeError``, ``KeyError``, ...), a silent result that disagrees with SciPy or
fails the check, or a write into an input the caller could not write."""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla

N = 6

# -- base problems --------------------------------------------------------------------------------


def _spd():
    a = np.full((N, N), 1.0) + N * np.eye(N)  # integer entries: survives an int cast
    return a


def _rhs():
    return np.arange(1.0, N + 1.0)


def _tall():
    rng = np.random.default_rng(3)
    return np.round(rng.standard_normal((N + 3, N)) * 4)


def _host(x):
    """A result as plain NumPy (tuples of arrays; None kept) for pickling and comparing."""
    if x is None or isinstance(x, (bool, int, float, complex, str)):
        return x
    if isinstance(x, (tuple, list)):
        return tuple(_host(v) for v in x)
    if hasattr(x, "toarray"):
        return np.asarray(x.toarray())
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _close(x, y, tol):
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape:
        return False
    if x.size == 0:
        return True
    scale = np.abs(y[np.isfinite(y)]).max() if np.isfinite(y).any() else 1.0
    return bool(np.allclose(x, y, rtol=tol, atol=tol * max(1.0, float(scale)), equal_nan=True))


def _flat(x):
    return x if isinstance(x, tuple) else (x,)


def _tol(*arrays):
    """Single precision's tolerance where an operand or a result is single (SciPy computes a
    bool input in float32), else double's."""
    single = any(np.asarray(a).dtype in (np.float32, np.complex64, np.float16) for a in arrays
                 if a is not None and hasattr(a, "dtype"))
    return 1e-3 if single else 1e-8


def _h(x):
    return np.swapaxes(np.conj(x), -1, -2)


# -- the functions: (ours, scipy, base operands, agree(ours, scipy, operands)) -------------------

def _same(o, s, ops):
    o, s = _flat(o), _flat(s)
    tol = _tol(*ops, *o, *s)
    return len(o) == len(s) and all(_close(x, y, tol) for x, y in zip(o, s))


def _reconstructs(factors, a, tol):
    """``q @ r`` (or ``u @ diag(s) @ vh``, ``p @ l @ u``) gives ``a`` (batched alike)."""
    prod = factors[0]
    for f in factors[1:]:
        prod = prod * f[..., None, :] if f.ndim == prod.ndim - 1 else prod @ f
    return _close(prod, np.asarray(a, dtype=prod.dtype), tol)


def _qr_agree(o, s, ops):
    """Q R gives ``a``, Q's columns orthonormal, R upper triangular (R's diagonal is not
    unique where ``a`` is rank deficient)."""
    tol = _tol(*ops, *o, *s)
    q, r = o
    eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2)
    return _reconstructs(o, ops[0], tol) and _close(_h(q) @ q, eye, tol) and \
        _close(np.tril(r, -1), np.zeros_like(r), tol)


def _svd_agree(o, s, ops):
    if not isinstance(o, tuple):
        return _close(o, s, _tol(*ops, o, s))
    tol = _tol(*ops, *o, *s)
    return _close(o[1], s[1], tol) and _reconstructs(o, ops[0], tol)


def _eigh_agree(o, s, ops):
    tol = _tol(*ops, *o, *s)
    if not _close(o[0], s[0], tol):
        return False
    v, w = o[1], o[0]  # a v = v w: the vectors of the problem, whatever their phases
    return _close(np.asarray(ops[0], dtype=v.dtype) @ v, v * w[..., None, :], max(tol, 1e-6))


def _lu_agree(o, s, ops):
    return _reconstructs(o, ops[0], _tol(*ops, *o, *s))


FUNCTIONS = {
    # name: (ours(module, a, b, overwrite), scipy(a, b, overwrite), operands, agree)
    "qr": (lambda m, a, b, w: m.decomp.qr(a, overwrite_a=w, mode="economic"),
           lambda a, b, w: sl.qr(a, overwrite_a=w, mode="economic"), ("a",), _qr_agree),
    "svd": (lambda m, a, b, w: m.decomp.svd(a, full_matrices=False, overwrite_a=w),
            lambda a, b, w: sl.svd(a, full_matrices=False, overwrite_a=w), ("a",), _svd_agree),
    "cholesky": (lambda m, a, b, w: m.decomp.cholesky(a, overwrite_a=w),
                 lambda a, b, w: sl.cholesky(a, overwrite_a=w), ("a",), _same),
    "cho_solve": (lambda m, a, b, w: m.decomp.cho_solve(m.decomp.cho_factor(a), b,
                                                        overwrite_b=w),
                  lambda a, b, w: sl.cho_solve(sl.cho_factor(a), b, overwrite_b=w),
                  ("a", "b"), _same),
    "logdet_cholesky": (lambda m, a, b, w: m.decomp.logdet_cholesky(m.decomp.cho_factor(a)),
                        lambda a, b, w: 2 * np.log(np.diagonal(sl.cho_factor(a)[0],
                                                               axis1=-2, axis2=-1)).sum(-1),
                        ("a",), _same),
    "solve_triangular": (lambda m, a, b, w: m.decomp.solve_triangular(a, b, overwrite_b=w),
                         lambda a, b, w: sl.solve_triangular(a, b, overwrite_b=w),
                         ("a", "b"), _same),
    "solve": (lambda m, a, b, w: m.decomp.solve(a, b, overwrite_a=w, overwrite_b=w),
              lambda a, b, w: sl.solve(a, b, overwrite_a=w, overwrite_b=w), ("a", "b"), _same),
    "solve_pos": (lambda m, a, b, w: m.decomp.solve(a, b, assume_a="pos", overwrite_b=w),
                  lambda a, b, w: sl.solve(a, b, assume_a="pos", overwrite_b=w),
                  ("a", "b"), _same),
    "lu_solve": (lambda m, a, b, w: m.decomp.lu_solve(m.decomp.lu_factor(a), b, overwrite_b=w),
                 lambda a, b, w: sl.lu_solve(sl.lu_factor(a), b, overwrite_b=w),
                 ("a", "b"), _same),
    "lu": (lambda m, a, b, w: m.decomp.lu(a, overwrite_a=w),
           lambda a, b, w: sl.lu(a, overwrite_a=w), ("a",), _lu_agree),
    "det": (lambda m, a, b, w: m.decomp.det(a, overwrite_a=w),
            lambda a, b, w: sl.det(a, overwrite_a=w), ("a",), _same),
    "inv": (lambda m, a, b, w: m.decomp.inv(a, overwrite_a=w),
            lambda a, b, w: sl.inv(a, overwrite_a=w), ("a",), _same),
    "eigh": (lambda m, a, b, w: m.decomp.eigh(a, overwrite_a=w),
             lambda a, b, w: sl.eigh(a, overwrite_a=w), ("a",), _eigh_agree),
    "eigvalsh": (lambda m, a, b, w: m.decomp.eigvalsh(a, overwrite_a=w),
                 lambda a, b, w: sl.eigvalsh(a, overwrite_a=w), ("a",), _same),
    "lstsq": (lambda m, a, b, w: m.decomp.lstsq(a, b, overwrite_a=w, overwrite_b=w)[0],
              lambda a, b, w: sl.lstsq(a, b, overwrite_a=w, overwrite_b=w)[0],
              ("a", "b"), _same),
    "pinv": (lambda m, a, b, w: m.decomp.pinv(a), lambda a, b, w: sl.pinv(a), ("a",), _same),
    "spsolve": (lambda m, a, b, w: m.sparse.spsolve(_csr(a), b),
                lambda a, b, w: spla.spsolve(_csr(a), b), ("a", "b"), _same),
    "sparse_solve": (lambda m, a, b, w: m.sparse.solve(_csr(a), b),
                     lambda a, b, w: spla.spsolve(_csr(a), b), ("a", "b"), _same),
    "gp_solve": (lambda m, a, b, w: m.gp.exact_gp_solve(a, b, jitter=None).alpha,
                 lambda a, b, w: sl.cho_solve(sl.cho_factor(a, lower=True), b),
                 ("a", "b"), _same),
    "matmul": (lambda m, a, b, w: m.dense.matmul(a, b),
               lambda a, b, w: np.matmul(a, b), ("a", "b"), _same),
}

#: Functions whose base ``a`` is tall (least squares) rather than SPD.
TALL = {"lstsq", "pinv", "qr", "svd"}


def _csr(a):
    if isinstance(a, np.ma.MaskedArray) or np.asarray(a).ndim != 2:
        return a  # what the class gives, unconverted: the call must judge it
    return sp.csr_matrix(np.asarray(a))


# -- the input classes: transform(x) -> x' (x a float64 base operand) ---------------------------

def _with(x, value):
    y = np.array(x, dtype=float)
    y.flat[0] = value
    return y


def _masked(x):
    y = _with(x, np.nan)
    mask = np.zeros(y.shape, bool)
    mask.flat[0] = True
    return np.ma.array(y, mask=mask)


def _readonly(x):
    y = np.array(x)
    y.flags.writeable = False
    return y


def _memmap(x):
    """A read-only memory map of ``x``'s values (one file per content, rewritten: bounded)."""
    y = np.array(x, dtype=float)
    digest = hashlib.sha1(y.tobytes() + str(y.shape).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"gpulinalg-hostile-{digest}.bin")
    if not os.path.exists(path):
        y.tofile(path)
    return np.memmap(path, dtype=float, mode="r", shape=y.shape)


def _strided(x):
    x = np.asarray(x)
    big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],))
    big[..., ::2] = x
    return big[..., ::2]


CLASSES = {
    "nan": lambda x: _with(x, np.nan),
    "inf": lambda x: _with(x, np.inf),
    "masked_nan": _masked,
    "readonly_overwrite": _readonly,
    "memmap_overwrite": _memmap,
    "int": lambda x: np.asarray(x).astype(np.int64),
    "bool": lambda x: np.asarray(x) != 0,
    "float32": lambda x: np.asarray(x, dtype=np.float32),
    "float16": lambda x: np.asarray(x, dtype=np.float16),
    "complex": lambda x: np.asarray(x) * (1 + 0j),
    "fortran": np.asfortranarray,
    "strided": _strided,
    "list": lambda x: np.asarray(x).tolist(),
    "object": lambda x: np.asarray(x).astype(object),
    "string": lambda x: np.asarray(x).astype(str),
    "tiny": lambda x: np.asarray(x) * 1e-300,
    "huge": lambda x: np.asarray(x) * 1e300,
    "empty": lambda x: np.zeros((0,) * np.asarray(x).ndim),
    "batched": lambda x: np.stack([np.asarray(x), 2 * np.asarray(x)]),
    "scalar": lambda x: np.float64(2.0),
}

#: Classes called with ``overwrite_*=True`` (the inputs are not writable: never to be written).
OVERWRITE = {"readonly_overwrite", "memmap_overwrite"}


def cases():
    """Every ``(function, class, target)`` of the matrix."""
    return [(f, c, t) for f, (_, _, targets, _) in sorted(FUNCTIONS.items())
            for c in sorted(CLASSES) for t in targets]


def operands(function, cls, target):
    a = _tall() if function in TALL else _spd()
    b = _rhs() if function not in TALL else np.arange(1.0, N + 4.0)
    if function == "matmul":
        b = np.ones((N, 2))
    x = CLASSES[cls](a if target == "a" else b)
    return (x, b) if target == "a" else (a, x)


# -- running one case (in the worker) -------------------------------------------------------------

def _outcome(call, inputs):
    before = [np.array(x, copy=True) if isinstance(x, np.ndarray) else None for x in inputs]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            value = _host(call())
            out = {"kind": "result", "value": value}
        except Exception as exc:  # noqa: BLE001 - classified by the parent
            out = {"kind": "error", "type": type(exc).__name__,
                   "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}
    out["warnings"] = sorted({w.category.__name__ for w in seen} |
                             {c.__name__ for w in seen for c in w.category.__mro__})
    out["mutated"] = any(b is not None and isinstance(x, np.ndarray) and not x.flags.writeable
                         and not np.array_equal(b, x, equal_nan=True)
                         for b, x in zip(before, inputs))
    return out


def _in_package(x, package):
    """``x`` as an array of ``package`` ("numpy", "torch", "torch-cuda", "cupy"); what that
    package cannot hold (masked, object, string, list, scalar operands) stays as it is."""
    if package == "numpy" or type(x) is not np.ndarray or x.dtype.kind not in "biufc":
        return x
    if package == "cupy":
        import cupy
        return cupy.asarray(x)
    import torch
    return torch.as_tensor(x, device="cuda" if package == "torch-cuda" else "cpu")


def run(function, cls, target, backend, side, package="numpy"):
    """The outcome of one side (``"ours"`` or ``"scipy"``) of a case, in the isolated worker;
    ours with the operands in ``package``."""
    if function == "crash":  # the harness's own test: the worker dies as a segfault kills it
        import signal
        os.kill(os.getpid(), signal.SIGSEGV)
    ours, theirs, _, _ = FUNCTIONS[function]
    w = cls in OVERWRITE
    a, b = operands(function, cls, target)
    if side == "scipy":
        return _outcome(lambda: theirs(a, b, w), (a, b))
    import gpulinalg
    a, b = _in_package(a, package), _in_package(b, package)
    with gpulinalg.config_context(backend=backend):
        return _outcome(lambda: ours(gpulinalg, a, b, w), (a, b))


def plain_operands(function, cls, target):
    """The case's operands as plain arrays (the masked entries NaN), for the agreement checks."""
    return tuple(_plain(x) for x in operands(function, cls, target))


def _plain(x):
    if isinstance(x, np.ma.MaskedArray):
        return np.asarray(x.filled(np.nan))
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001
        return None


# -- the verdict (in the parent) ------------------------------------------------------------------

#: Exceptions that name nothing the caller did: an internal slip, never a clear error.
INTERNAL = {"AttributeError", "KeyError", "IndexError", "UnboundLocalError", "NameError",
            "SystemError", "AssertionError", "RecursionError", "ZeroDivisionError"}
#: Functions whose non-finite result equal to NumPy's is correct without NumPy's
#: floating-point ``RuntimeWarning`` (a GPU product raises no IEEE flags: CuPy and torch warn
#: neither); a solver's non-finite result must still warn or raise.
IEEE_SAME = {"matmul"}
#: Warnings that say the answer may be poor.
CONDITIONING = {"IllConditionedWarning", "LinAlgWarning", "MatrixRankWarning",
                "RuntimeWarning", "ResidualWarning", "NotPositiveDefiniteWarning"}


def _finite(value):
    vals = value if isinstance(value, tuple) else (value,)
    try:
        return all(v is None or np.all(np.isfinite(np.asarray(v, dtype=complex)))
                   for v in vals)
    except (TypeError, ValueError):
        return False


def verdict(function, record):
    """``("correct" | "warning" | "clear error", None)`` or ``("FAIL", why)``."""
    ours, ref = record["ours"], record["scipy"]
    if ref["kind"] in ("crash", "hang"):
        ref = {"kind": "error", "warnings": []}  # SciPy's own crash: it gives no reference
    if ours["kind"] in ("crash", "hang"):
        return "FAIL", f"ours: {ours['kind']}"
    if ours.get("mutated"):
        return "FAIL", "wrote into a read-only input"
    if ours["kind"] == "error":
        if ours["type"] in INTERNAL or not ours["message"].strip():
            return "FAIL", f"unclear error {ours['type']}: {ours['message']!r}"
        return "clear error", None
    if set(ours["warnings"]) & CONDITIONING:
        return "warning", None
    agree = FUNCTIONS[function][3]
    value = ours["value"]
    if ref["kind"] == "result" and not set(ref["warnings"]) & CONDITIONING:
        try:
            ok = agree(value, ref["value"], record["operands"])
        except Exception as exc:  # noqa: BLE001 - a result of another shape or kind
            return "FAIL", f"silent result unlike SciPy's ({type(exc).__name__}: {exc})"
        return ("correct", None) if ok else ("FAIL", "silent result unlike SciPy's")
    # SciPy raised, warned or gave non-finite values: a silent answer must be finite
    if _finite(value):
        return "correct", None
    if function in IEEE_SAME and ref["kind"] == "result" and \
            set(ref["warnings"]) & CONDITIONING <= {"RuntimeWarning"}:
        try:  # NumPy's own non-finite values, without its floating-point warning
            if agree(value, ref["value"], record["operands"]):
                return "correct", None
        except Exception:  # noqa: BLE001 - judged as silent below
            pass
    return "FAIL", f"silent non-finite result where SciPy gave {ref['kind']}"
