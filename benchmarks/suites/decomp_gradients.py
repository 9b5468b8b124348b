"""Training steps through gpulinalg's gradients against the same steps written with torch.linalg,
on CUDA tensors, same GPU, same run (the torch users' bar: forward + backward at or below
torch.linalg's).

Cases, each a loss's forward and ``backward()`` on a leaf that requires grad:

* GP step: ``0.5 y^T K^{-1} y + 0.5 log det K`` of an SPD ``K`` (n = 4096, 8192, 16384,
  float64) through ``cholesky`` + ``cho_solve`` + ``logdet_cholesky``; torch:
  ``linalg.cholesky`` + ``cholesky_solve`` + ``2 sum log diag L``.
* SVD: ``sum(S) + <U_k S_k Vh_k, C>`` (k = a quarter of the rank; gauge-invariant) of
  4096x1024, 8192x2048 and 1024x4096 float32 and 2048x2048 float64; torch: ``linalg.svd``
  (``full_matrices=False``).
* eigh: ``sum(w) + <V_k V_k^T, C>`` (the top quarter) of a symmetric 4096^2 float64 matrix;
  torch: ``linalg.eigh``.
* solve: ``<solve(A, B), C>`` of a 8192^2 float64 system with 16 right-hand sides; torch:
  ``linalg.solve``.

Every row has the cold first step and the warm median (:func:`benchmarks._harness.timed_sync`);
both rows carry ``grad_rel_err``, ``||g - g_ref||_F / ||g_ref||_F`` of the leaf's gradient
against torch.linalg's step in float64. Without CUDA torch every row is absent.

``python -m benchmarks decomp_gradients [--quick] [--json PATH]`` (about 2 minutes on an H100;
``--quick``: small sizes).
"""

from benchmarks._harness import absent, gpu_libraries, row, run_sections, timed_sync

SUITE = "decomp_gradients"
CASES = ("gp step", "svd", "eigh", "solve")


def run(quick=False):
    cupy, torch, why = gpu_libraries()
    if torch is None:
        return [absent(SUITE, case, "all", why or "torch with CUDA not installed")
                for case in CASES]
    sizes = (512, 1024) if quick else (4096, 8192, 16384)
    shapes = ((1024, 256, "float32"), (256, 1024, "float32")) if quick else \
        ((4096, 1024, "float32"), (8192, 2048, "float32"), (1024, 4096, "float32"),
         (2048, 2048, "float64"))
    sections = (("gp step", lambda: [r for n in sizes for r in _gp_rows(torch, n, quick)]),
                ("svd", lambda: [r for s in shapes for r in _svd_rows(torch, *s, quick)]),
                ("eigh", lambda: _eigh_rows(torch, 512 if quick else 4096, quick)),
                ("solve", lambda: _solve_rows(torch, 512 if quick else 8192, quick)))
    return run_sections(SUITE, sections, cupy)


def _step(torch, leaf, loss_fn):
    """One training step: the loss's forward and backward; the leaf's gradient."""
    leaf.grad = None
    loss_fn(leaf).backward()
    return leaf.grad


def _pair(torch, case, leaf, ours, theirs, repeat, **extra):
    """Rows of gpulinalg's step and torch.linalg's on the same leaf, each with the relative
    error of its gradient against torch.linalg's step in float64 (a float32 case's spectrum
    gaps make both float32 gradients differ from it, each its own way)."""
    import gpulinalg
    t_ours, g_ours = timed_sync(lambda: _step(torch, leaf, ours).clone(), repeat)
    where = gpulinalg.last_run().backend
    t_theirs, g_theirs = timed_sync(lambda: _step(torch, leaf, theirs).clone(), repeat)
    ref = _step(torch, leaf.detach().double().requires_grad_(), theirs)

    def err(g):
        return float(torch.linalg.norm(g.double() - ref) / torch.linalg.norm(ref))
    return [row(SUITE, case, "gpulinalg (torch in)", t_ours, where=where,
                grad_rel_err=err(g_ours), **extra),
            row(SUITE, case, "torch.linalg", t_theirs, grad_rel_err=err(g_theirs), **extra)]


def _spd(torch, n, dtype):
    g = torch.randn(n, n, dtype=dtype, device="cuda", generator=_gen(torch, n))
    return (g @ g.mT / n + torch.eye(n, dtype=dtype, device="cuda")).requires_grad_()


def _gen(torch, seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _gp_rows(torch, n, quick):
    from gpulinalg import decomp
    k = _spd(torch, n, torch.float64)
    y = torch.randn(n, 1, dtype=torch.float64, device="cuda", generator=_gen(torch, 1))

    def ours(k):
        c = decomp.cholesky(k, lower=True, check_finite=False)
        alpha = decomp.cho_solve((c, True), y, check_finite=False)
        return 0.5 * (y * alpha).sum() + 0.5 * decomp.logdet_cholesky((c, True))

    def theirs(k):
        low = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y, low)
        return 0.5 * (y * alpha).sum() + low.diagonal().log().sum()
    return _pair(torch, f"gp step n={n} float64", k, ours, theirs, 2 if quick else 3)


def _svd_rows(torch, m, n, dtype, quick):
    from gpulinalg import decomp
    dt = getattr(torch, dtype)
    a = torch.randn(m, n, dtype=dt, device="cuda", generator=_gen(torch, m + n)).requires_grad_()
    c = torch.randn(m, n, dtype=dt, device="cuda", generator=_gen(torch, 7))
    k = min(m, n) // 4

    def loss(u, s, vh):
        return s.sum() + ((u[:, :k] * s[:k]) @ vh[:k] * c).sum()

    def ours(a):
        return loss(*decomp.svd(a, full_matrices=False, check_finite=False))

    def theirs(a):
        return loss(*torch.linalg.svd(a, full_matrices=False))
    return _pair(torch, f"svd {m}x{n} {dtype}", a, ours, theirs, 2 if quick else 3)


def _eigh_rows(torch, n, quick):
    from gpulinalg import decomp
    g = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=_gen(torch, 3))
    a = ((g + g.mT) / 2).requires_grad_()
    c = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=_gen(torch, 4))
    k = n // 4

    def loss(w, v):
        top = v[:, -k:]
        return w.sum() + (top @ top.mT * c).sum()

    def ours(a):
        return loss(*decomp.eigh(a, check_finite=False))

    def theirs(a):
        return loss(*torch.linalg.eigh(a))
    return _pair(torch, f"eigh {n}x{n} float64", a, ours, theirs, 2 if quick else 3)


def _solve_rows(torch, n, quick):
    from gpulinalg import decomp
    g = torch.randn(n, n, dtype=torch.float64, device="cuda", generator=_gen(torch, 5))
    a = (g + n ** 0.5 * torch.eye(n, dtype=torch.float64, device="cuda")).requires_grad_()
    b = torch.randn(n, 16, dtype=torch.float64, device="cuda", generator=_gen(torch, 6))
    c = torch.randn(n, 16, dtype=torch.float64, device="cuda", generator=_gen(torch, 8))

    def ours(a):
        return (decomp.solve(a, b, check_finite=False) * c).sum()

    def theirs(a):
        return (torch.linalg.solve(a, b) * c).sum()
    return _pair(torch, f"solve {n}x{n} float64, 16 right-hand sides", a, ours, theirs,
                 2 if quick else 3)

