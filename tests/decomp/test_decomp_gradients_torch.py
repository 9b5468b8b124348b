"""Gradients of torch tensors through ``gpulinalg.decomp``: ``gradcheck`` (and
``gradgradcheck``) in float64 and complex128 for every function with a rule, the same loss
through torch.linalg giving the same gradients, batches, CUDA tensors (``gpu``-marked), and the
rule that a result is never silently detached: a call without a rule raises."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.autograd import gradcheck, gradgradcheck  # noqa: E402

import gpulinalg  # noqa: E402
from gpulinalg import decomp, dense  # noqa: E402

N = 5
DTYPES = [torch.float64, torch.complex128]


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA build of torch and a GPU")
    return request.param


def _rand(*shape, dtype, device, grad=True):
    g = torch.Generator().manual_seed(sum(shape) + (7 if dtype.is_complex else 0))
    x = torch.randn(*shape, dtype=dtype, generator=g).to(device)
    return x.requires_grad_(grad)


def _spd(x):
    return x @ x.mH + x.shape[-1] * torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _well(x):
    return x + x.shape[-1] * torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _projector(w, v):
    """``v diag(w) v^H``: independent of the eigenvectors' phases."""
    return (v * w[..., None, :]) @ v.mH


def _moduli(*outs):
    """The factors' entries' squared moduli: independent of the vectors' phases."""
    return tuple(o.abs() ** 2 for o in outs)


def _gaps(h, lo, hi):
    """A ``subset_by_value`` interval holding eigenvalues ``lo..hi`` of ``h``, its ends halfway
    between neighbours (the count stays put under gradcheck's steps)."""
    w = torch.linalg.eigvalsh(h.detach()).cpu()
    return float(w[lo - 1] + w[lo]) / 2, float(w[hi] + w[hi + 1]) / 2


def _shifted(x):
    """A stack of two Hermitian matrices near ``diag(-3, -2, 1, 2, 3)`` and ``diag(0.5, 1.5, 4,
    5, 6)``: ``subset_by_value=(0, 2.5)`` keeps columns 2, 3 of the first and 0, 1 of the
    second."""
    d = torch.tensor([[-3.0, -2, 1, 2, 3], [0.5, 1.5, 4, 5, 6]], device=x.device)
    return d.diag_embed().to(x.dtype) + 0.05 * (x + x.mH)


def _generalized(itype, subset=None):
    return lambda x, y: _projector(*decomp.eigh(x + x.mH, _spd(y.mT), type=itype,
                                                subset_by_index=subset))


def _top3(x, k=3):
    """The top-``k`` triplets' matrix times a fixed matrix: independent of the vectors'
    phases."""
    u, s, vh = decomp.truncated_svd(x, k, random_state=0)
    m = torch.linspace(-1, 1, x.shape[-1] * 2, dtype=x.dtype, device=x.device)
    return (u * s) @ vh @ m.reshape(x.shape[-1], 2)


VECTOR_CHECKS = {  # eigenvectors of subsets and of generalized problems, truncated_svd's vectors
    "eigh_subset_index": (lambda x: _moduli(*decomp.eigh(x + x.mH, subset_by_index=[1, 3])),
                          [(N, N)]),
    "eigh_subset_value": (lambda x: _moduli(*decomp.eigh(x + x.mH,
                                                         subset_by_value=_gaps(x + x.mH, 1, 2))),
                          [(N, N)]),
    "eigh_subset_value_batch": (lambda x: _projector(*decomp.eigh(
        _shifted(x), subset_by_value=(0.0, 2.5))), [(2, N, N)]),
    "eigh_subset_vectors_only": (lambda x: decomp.eigh(x + x.mH, subset_by_index=[3, 4])[1]
                                 .abs() ** 2, [(N, N)]),
    "eigh_generalized_type2_subset": (_generalized(2, [0, 2]), [(N, N), (N, N)]),
    "eigh_generalized_type3_moduli": (lambda x, y: _moduli(*decomp.eigh(
        x + x.mH, _spd(y.mT), type=3)), [(N, N), (N, N)]),
    "eigvalsh_generalized_type3": (lambda x, y: decomp.eigvalsh(x + x.mH, _spd(y.mT), type=3),
                                   [(N, N), (N, N)]),
    "truncated_svd": (_top3, [(8, 5)]),
    "truncated_svd_wide_moduli": (lambda x: _moduli(*decomp.truncated_svd(x, 2, random_state=0)),
                                  [(4, 7)]),
}

LU_RECTANGULAR = {  # wide and tall: torch's linalg_lu_backward beyond the square case
    "lu_wide": (lambda x: decomp.lu(x)[1:], [(3, N)]),
    "lu_tall": (lambda x: decomp.lu(x)[1:], [(N, 3)]),
    "lu_wide_permute_l": (lambda x: decomp.lu(x, permute_l=True), [(3, N)]),
    "lu_tall_permute_l": (lambda x: decomp.lu(x, permute_l=True), [(N, 3)]),
    "lu_wide_p_indices_batch": (lambda x: decomp.lu(x, p_indices=True)[1:], [(2, 3, N)]),
    "lu_tall_p_indices_batch": (lambda x: decomp.lu(x, p_indices=True)[1:], [(2, N, 3)]),
    "lu_tall_only_u": (lambda x: decomp.lu(x)[2], [(N, 3)]),
    "lu_wide_only_l": (lambda x: decomp.lu(x)[1], [(3, N)]),
    "lu_factor_wide": (lambda x: decomp.lu_factor(x)[0], [(3, N)]),
    "lu_factor_tall_batch": (lambda x: decomp.lu_factor(x)[0], [(2, N, 3)]),
}

CHECKS = {  # name: (function of the inputs, input shapes)
    "cholesky": (lambda x: decomp.cholesky(_spd(x)), [(N, N)]),
    "cholesky_lower": (lambda x: decomp.cholesky(_spd(x), lower=True), [(N, N)]),
    "cho_factor": (lambda x: decomp.cho_factor(_spd(x))[0], [(N, N)]),
    "cho_solve": (lambda x, b: decomp.cho_solve(decomp.cho_factor(_spd(x), lower=True), b),
                  [(N, N), (N, 2)]),
    "cho_solve_upper_vector": (
        lambda x, b: decomp.cho_solve(decomp.cho_factor(_spd(x), lower=False), b[:, 0]),
        [(N, N), (N, 2)]),
    "cho_solve_stack_of_b": (
        lambda x, b: decomp.cho_solve(decomp.cho_factor(_spd(x), lower=True), b),
        [(N, N), (2, N, 3)]),
    "logdet_cholesky": (lambda x: decomp.logdet_cholesky(decomp.cho_factor(_spd(x))),
                        [(N, N)]),
    "solve_triangular": (lambda x, b: decomp.solve_triangular(_well(x), b, lower=True),
                         [(N, N), (N, 2)]),
    "solve_triangular_trans": (lambda x, b: decomp.solve_triangular(_well(x), b[:, 0], trans=1,
                                                                   unit_diagonal=True),
                               [(N, N), (N, 2)]),
    "solve": (lambda x, b: decomp.solve(_well(x), b), [(N, N), (N, 2)]),
    "solve_pos": (lambda x, b: decomp.solve(_spd(x), b, assume_a="pos"), [(N, N), (N, 2)]),
    "solve_upper": (lambda x, b: decomp.solve(_well(x), b, assume_a="upper triangular"),
                    [(N, N), (N,)]),
    "solve_batch_vector": (lambda x, b: decomp.solve(_well(x), b), [(3, N, N), (N,)]),
    "inv": (lambda x: decomp.inv(_well(x)), [(N, N)]),
    "det": (lambda x: decomp.det(_well(x)), [(N, N)]),
    "slogdet": (lambda x: decomp.slogdet(_well(x)).logabsdet, [(2, N, N)]),
    "eigvalsh": (lambda x: decomp.eigvalsh(x + x.mH), [(N, N)]),
    "eigh": (lambda x: (lambda w, v: (v * w[..., None, :]) @ v.mH)(*decomp.eigh(x + x.mH)),
             [(N, N)]),
    "svdvals": (lambda x: decomp.svd(x, compute_uv=False), [(6, 4)]),
    "svd": (lambda x: (lambda u, s, vh: u @ vh)(*decomp.svd(x, full_matrices=False)),
            [(4, 6)]),
    "qr_tall": (lambda x: tuple(decomp.qr(x, mode="economic")), [(6, 4)]),
    "qr_wide": (lambda x: tuple(decomp.qr(x)), [(4, 6)]),
    "qr_r": (lambda x: decomp.qr(x, mode="r")[0], [(5, 5)]),
    "pinv": (lambda x: decomp.pinv(x), [(6, 4)]),
    "lstsq": (lambda x, b: tuple(decomp.lstsq(x, b))[:2], [(7, 4), (7, 2)]),
    "lstsq_wide_s": (lambda x, b: (decomp.lstsq(x, b).x, decomp.lstsq(x, b).s), [(4, 7), (4,)]),
    "lstsq_batch_vector": (lambda x, b: tuple(decomp.lstsq(x, b))[:2], [(3, 6, 4), (6,)]),
    "lu_factor": (lambda x: decomp.lu_factor(x)[0], [(2, N, N)]),
    "lu_solve": (lambda x, b: decomp.lu_solve(decomp.lu_factor(x), b), [(N, N), (N, 2)]),
    "lu_solve_trans": (lambda x, b: decomp.lu_solve(decomp.lu_factor(x), b, trans=1),
                       [(2, N, N), (N,)]),
    "lu": (lambda x: decomp.lu(x)[1:], [(N, N)]),
    "lu_permute_l": (lambda x: decomp.lu(x, permute_l=True), [(N, N)]),
    **LU_RECTANGULAR,
    "eigvalsh_subset": (lambda x: decomp.eigvalsh(x + x.mH, subset_by_index=[1, 3]), [(N, N)]),
    "eigvalsh_generalized": (lambda x, y: decomp.eigh(x + x.mH, _spd(y), subset_by_index=[0, 2])[0],
                             [(N, N), (N, N)]),
    "truncated_svd_values": (lambda x: decomp.truncated_svd(x, 3, random_state=0).S, [(30, 8)]),
    **{f"eigh_generalized_type{t}": (_generalized(t), [(N, N), (N, N)]) for t in (1, 2, 3)},
    **VECTOR_CHECKS,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "complex128"])
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_gradcheck(name, dtype, device):
    fn, shapes = CHECKS[name]
    inputs = tuple(_rand(*s, dtype=dtype, device=device) for s in shapes)
    out = fn(*inputs)
    assert all(o.grad_fn is not None for o in (out if isinstance(out, tuple) else (out,)))
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("name", ["cholesky", "cho_solve", "cho_solve_upper_vector", "solve",
                                  "det", "eigvalsh",
                                  "svdvals", "solve_triangular", "qr_tall", "pinv", "lu_solve"])
def test_gradgradcheck(name, device):
    fn, shapes = CHECKS[name]
    inputs = tuple(_rand(*s, dtype=torch.float64, device=device) for s in shapes)
    assert gradgradcheck(fn, inputs)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "complex128"])
@pytest.mark.parametrize("name", sorted(VECTOR_CHECKS) + sorted(LU_RECTANGULAR)
                         + ["eigh_generalized_type1"])
def test_gradgradcheck_of_vectors(name, dtype, device):
    """The backward through the whole spectrum (subsets, truncated_svd), the generalized
    problem's reduction and a wide or tall LU's solves are differentiable again."""
    fn, shapes = CHECKS[name]
    inputs = tuple(_rand(*s, dtype=dtype, device=device) for s in shapes)
    assert gradgradcheck(fn, inputs)


def _loss(*outs):
    return sum((o.abs() ** 3).sum() for o in outs)


SAME_AS_TORCH = {  # name: (gpulinalg, torch.linalg), the same function of one input
    "cholesky": (lambda x: decomp.cholesky(_spd(x), lower=True),
                 lambda x: torch.linalg.cholesky(_spd(x))),
    "cho_solve_logdet": (
        lambda x: (lambda c: (decomp.cho_solve(c, x[:, :2]), decomp.logdet_cholesky(c)))(
            decomp.cho_factor(_spd(x), lower=True)),
        lambda x: (lambda c: (torch.cholesky_solve(x[:, :2], c),
                              2 * c.diagonal().real.log().sum()))(torch.linalg.cholesky(_spd(x)))),
    "solve": (lambda x: decomp.solve(_well(x), x[:, :2]),
              lambda x: torch.linalg.solve(_well(x), x[:, :2])),
    "inv_det": (lambda x: (decomp.inv(_well(x)), decomp.det(_well(x))),
                lambda x: (torch.linalg.inv(_well(x)), torch.linalg.det(_well(x)))),
    "eigh": (lambda x: tuple(decomp.eigh(x + x.mH)), lambda x: tuple(torch.linalg.eigh(x + x.mH))),
    "svd": (lambda x: tuple(decomp.svd(x, full_matrices=False)),
            lambda x: tuple(torch.linalg.svd(x, full_matrices=False))),
    "lu": (lambda x: decomp.lu(x)[1:], lambda x: torch.linalg.lu(x)[1:]),
    "lu_wide": (lambda x: decomp.lu(x[:3])[1:], lambda x: torch.linalg.lu(x[:3])[1:]),
    "lu_tall": (lambda x: decomp.lu(x[:, :3])[1:], lambda x: torch.linalg.lu(x[:, :3])[1:]),
    "lu_wide_permute_l": (lambda x: decomp.lu(x[:3], permute_l=True),
                          lambda x: (lambda p, l, u: (p @ l, u))(*torch.linalg.lu(x[:3]))),
    "lu_tall_permute_l": (lambda x: decomp.lu(x[:, :3], permute_l=True),
                          lambda x: (lambda p, l, u: (p @ l, u))(*torch.linalg.lu(x[:, :3]))),
    "lu_tall_p_indices": (lambda x: decomp.lu(x[:, :3], p_indices=True)[1:],
                          lambda x: torch.linalg.lu(x[:, :3])[1:]),
    "lu_factor_wide": (lambda x: decomp.lu_factor(x[:3])[0],
                       lambda x: torch.linalg.lu_factor(x[:3])[0]),
    "lu_factor_tall": (lambda x: decomp.lu_factor(x[:, :3])[0],
                       lambda x: torch.linalg.lu_factor(x[:, :3])[0]),
    "solve_triangular": (
        lambda x: decomp.solve_triangular(_well(x), x[:, :2], lower=True),
        lambda x: torch.linalg.solve_triangular(_well(x).tril(), x[:, :2], upper=False)),
    "eigh_subset_index": (lambda x: tuple(decomp.eigh(x + x.mH, subset_by_index=[1, 3])),
                          lambda x: (lambda w, v: (w[1:4], v[:, 1:4]))(
                              *torch.linalg.eigh(x + x.mH))),
    "eigh_subset_value": (lambda x: tuple(decomp.eigh(x + x.mH,
                                                      subset_by_value=_gaps(x + x.mH, 2, 3))),
                          lambda x: (lambda w, v: (w[2:4], v[:, 2:4]))(
                              *torch.linalg.eigh(x + x.mH))),
    **{f"eigh_generalized_type{t}": (
        lambda x, t=t: tuple(decomp.eigh(x + x.mH, _spd(x.mT), type=t, subset_by_index=[1, 4])),
        lambda x, t=t: _torch_generalized(x + x.mH, _spd(x.mT), t, slice(1, 5)))
       for t in (1, 2, 3)},
    "truncated_svd": (lambda x: tuple(decomp.truncated_svd(x, 3, random_state=0)),
                      lambda x: (lambda u, s, vh: (u[:, :3], s[:3], vh[:3]))(
                          *torch.linalg.svd(x, full_matrices=False))),
}


def _torch_generalized(a, b, itype, cols):
    """``eigh(a, b, type=itype)`` by torch.linalg (Cholesky reduction), eigenpairs ``cols``."""
    low = torch.linalg.cholesky(b)
    if itype == 1:
        c = torch.linalg.solve_triangular(low, torch.linalg.solve_triangular(
            low, a, upper=False).mH, upper=False)
    else:
        c = low.mH @ a @ low
    w, y = torch.linalg.eigh(c)
    v = low @ y if itype == 3 else torch.linalg.solve_triangular(low.mH, y, upper=True)
    return w[cols], v[:, cols]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "complex128"])
@pytest.mark.parametrize("name", sorted(SAME_AS_TORCH))
def test_same_gradients_as_torch_linalg(name, dtype, device):
    ours, theirs = SAME_AS_TORCH[name]
    x = _rand(N, N, dtype=dtype, device=device)
    out = ours(x)
    g_ours, = torch.autograd.grad(_loss(*(out if isinstance(out, tuple) else (out,))), x)
    out = theirs(x)
    g_theirs, = torch.autograd.grad(_loss(*(out if isinstance(out, tuple) else (out,))), x)
    assert torch.allclose(g_ours, g_theirs, rtol=1e-10, atol=1e-10)


def test_float32_gradient_keeps_its_dtype(device):
    x = _rand(N, N, dtype=torch.float32, device=device)
    out = decomp.solve(_well(x), torch.ones(N, device=device))
    g, = torch.autograd.grad(out.sum(), x)
    assert g.dtype == torch.float32 and torch.isfinite(g).all()


def test_scalar_results_are_tensors_on_the_input_device(device):
    x = _rand(N, N, dtype=torch.float64, device=device)
    d = decomp.det(_well(x))
    assert isinstance(d, torch.Tensor) and d.device == x.device and d.grad_fn is not None


UNSUPPORTED = {  # calls without a gradient (rule): they must refuse, never detach
    "qr_pivoting": lambda x: decomp.qr(x, pivoting=True),
    "qr_full_tall": lambda x: decomp.qr(x[:, :3]),
    "lstsq_rank_deficient": lambda x: decomp.lstsq(x[:, [0, 1, 1]], x[:, 0]),
    "svd_full_matrices": lambda x: decomp.svd(x[:, :3]),
    "matmul_backward_complex": lambda x: (lambda c: dense.matmul_backward(c, c, c))(
        x.to(torch.complex128)),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_no_rule_refuses_instead_of_detaching(name):
    x = _rand(N, N, dtype=torch.float64, device="cpu")
    with pytest.raises(NotImplementedError, match="not supported|no gradient"):
        UNSUPPORTED[name](x)
    with torch.no_grad():  # without a graph to keep, the call runs
        UNSUPPORTED[name](x)
    UNSUPPORTED[name](x.detach())


@pytest.mark.parametrize("itype", [1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "complex128"])
def test_generalized_eigh_with_gradients_gives_the_same_values(itype, dtype, device):
    """The reduction that carries the gradient gives the call's eigenpairs (signs included),
    reading the ``lower`` triangles of ``a`` and ``b`` only."""
    x = _rand(2, N, N, dtype=dtype, device=device)
    a, b = x[0] + x[0].mH, _spd(x[1])
    for lower, junk in ((True, torch.ones(N, N).triu(1)), (False, torch.ones(N, N).tril(-1))):
        junk = junk.to(dtype=dtype, device=device)
        w, v = decomp.eigh(a + junk, b + 2 * junk, type=itype, lower=lower)
        assert w.grad_fn is not None and v.grad_fn is not None
        w0, v0 = decomp.eigh(a.detach(), b.detach(), type=itype)
        assert torch.allclose(w, w0, rtol=1e-12, atol=1e-12)
        assert torch.allclose(v, v0, rtol=1e-10, atol=1e-10)


def test_generalized_gradient_is_hermitian(device):
    """As torch.linalg's: differentiated over Hermitian ``a`` and ``b``, whichever triangle is
    read."""
    x = _rand(2, N, N, dtype=torch.complex128, device=device, grad=False)
    a, b = (y.requires_grad_() for y in (x[0] + x[0].mH, _spd(x[1])))
    loss = _projector(*decomp.eigh(a, b, type=2, lower=False)).abs().sum()
    for g in torch.autograd.grad(loss, (a, b)):
        assert torch.allclose(g, g.mH, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in decomp.__all__
                                  if callable(getattr(decomp, n)) and n[0].islower()])
def test_every_public_function_is_guarded(name):
    """A public function either has a gradient rule or refuses: never a detached result."""
    from gpulinalg._runtime import gradients
    guard = gradients.differentiable("x")(lambda: None).__code__
    assert getattr(decomp, name).__code__ is guard, name


def test_numpy_inputs_take_no_part(rng):
    """NumPy arrays next to a tensor that requires grad: the tensor's gradient only."""
    a = rng.standard_normal((N, N)) + N * np.eye(N)
    b = _rand(N, dtype=torch.float64, device="cpu")
    x = decomp.solve(a, b)
    g, = torch.autograd.grad(x.sum(), b)
    np.testing.assert_allclose(g.numpy(), np.linalg.solve(a.T, np.ones(N)), rtol=1e-12)
    assert gpulinalg.last_run().op == "decomp.solve"


@pytest.mark.parametrize("cols", [None, 2])
def test_gp_solve_gradcheck(device, cols):
    x = _rand(N, N, dtype=torch.float64, device=device)
    y = _rand(N, *(() if cols is None else (cols,)), dtype=torch.float64, device=device)

    def fn(x, y):
        return tuple(gpulinalg.gp.exact_gp_solve(_spd(x), y, jitter=None))[:4]
    assert gradcheck(fn, (x, y))
    assert gradgradcheck(lambda x, y: fn(x, y)[3], (x, y))


def test_gp_solve_same_gradients_as_torch(device):
    import math
    x = _rand(N, N, dtype=torch.float64, device=device)
    y = _rand(N, 2, dtype=torch.float64, device=device)
    res = gpulinalg.gp.exact_gp_solve(_spd(x), y, jitter=None)
    ours = torch.autograd.grad(res.log_marginal_likelihood + res.alpha.sum(), (x, y))
    low = torch.linalg.cholesky(_spd(x))
    alpha = torch.cholesky_solve(y, low)
    lml = (-0.5 * (y * alpha).sum() - 2 * low.diagonal().log().sum()
           - N * math.log(2 * math.pi))
    theirs = torch.autograd.grad(lml + alpha.sum(), (x, y))
    for u, v in zip(ours, theirs):
        assert torch.allclose(u, v, rtol=1e-10, atol=1e-10)


def test_torch_compile_breaks_the_graph_at_gpulinalg_calls():
    """torch.compile runs gpulinalg's calls eagerly (a graph break), gradients included."""
    def f(x):
        a = _spd(x)
        return (decomp.logdet_cholesky(decomp.cho_factor(a, lower=True))
                + decomp.solve(a, x[:, 0]).sum())
    x = _rand(N, N, dtype=torch.float64, device="cpu")
    compiled = torch.compile(f, backend="eager")
    g_compiled, = torch.autograd.grad(compiled(x), x)
    g_eager, = torch.autograd.grad(f(x), x)
    assert torch.allclose(g_compiled, g_eager, rtol=1e-12, atol=1e-12)
    assert torch.allclose(compiled(x), f(x))


@pytest.mark.parametrize("shape", [(3, N), (N, 3), (2, N, 3)])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "complex128"])
def test_rectangular_lu_with_gradients_gives_the_same_factors(shape, dtype, device):
    """The call that carries the gradient returns what the call without one does: ``P`` real
    and ``m x m``, ``L`` ``m x k``, ``U`` ``k x n``, the same pivots."""
    x = _rand(*shape, dtype=dtype, device=device)
    for kwargs in (dict(), dict(p_indices=True), dict(permute_l=True)):
        ours, plain = decomp.lu(x, **kwargs), decomp.lu(x.detach(), **kwargs)
        for u, v in zip(ours, plain):
            assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u.detach(), v)
    lu, piv = decomp.lu_factor(x)
    lu0, piv0 = decomp.lu_factor(x.detach())
    assert lu.grad_fn is not None and torch.equal(lu.detach(), lu0) and torch.equal(piv, piv0)
