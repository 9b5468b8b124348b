"""The streamed triangular solve: stacks of medium and large matrices with few right-hand
sides, one thread block per matrix (and group of right-hand sides), in one launch.

``gl_small_trsm`` (:mod:`._fused_cuda`) holds its matrix in shared memory, so it stops at
order 64. Above, cuBLAS ``trsmBatched`` runs a chain of launches per call (diagonal-block
solves and GEMM updates, 16 and more for order 512) and, in double precision, loses to
torch's batched solves. ``gl_stream_trsm`` holds only the solution in shared memory and
streams the matrix through once per substitution:

* a panel of 32 rows at a time: the block's warps sum the panel's products with the solved
  entries (coalesced along whichever axis of the matrix is contiguous: consecutive lanes read
  consecutive addresses), stage the panel's diagonal block in shared memory, and then one warp
  per right-hand side substitutes through the diagonal block by shuffles;
* ``cho_solve`` runs the forward and the backward substitution in the same launch, the
  solution staying in shared memory between them;
* the conditioning rule of :mod:`._triangular_xp` and the finiteness flags are worked out in
  the same pass and folded into the same 3-word summary as ``gl_small_trsm``'s, with the same
  arguments, so the engine's plans and checks (:func:`._triangular_cuda.fused_solve`) serve
  both kernels.

The route table of :mod:`._batched_plan` (row ``"stream"``) says where it runs. Part of
decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime.device import attribute
from ..._runtime.kernels import raw_kernel
from ._fused_cuda import COMMON, checks, flag_before, strides_of
from ._scalars_cuda import KERNEL_TYPES

__all__ = ["fits", "group", "shared_limit", "shared_optin", "launch_args", "trsm", "MAX_SHARED",
           "STATIC_SHARED", "MAX_RHS", "TARGET_BLOCKS", "UNROLL"]

#: Shared memory a block may take for its solution columns (``n * kg`` entries), at most:
#: less on devices whose blocks may opt into less (:func:`shared_limit`).
MAX_SHARED = 96 * 1024
#: What the kernel's static shared memory takes at most (34 KiB for complex128), kept free
#: of the device's per-block limit.
STATIC_SHARED = 40 * 1024
#: Most right-hand sides: the matrix is read once per group of at most :data:`GROUP`
#: columns, so many more are better served by ``trsmBatched``'s GEMMs.
MAX_RHS = 16
#: Most right-hand sides one block solves (its warps substitute one each, at once).
GROUP = 4
#: Loads in flight per thread in a panel's sums (lanes along its rows), a compile option, by
#: order: ``((max_order, loads), ...)``. Above order 1024 a launch has few blocks, each
#: bound by its own loads: on the H200 8 took cho_solve 8 x 2048^2 fp64 from 2.48 to 2.00 ms
#: and 16 x 4096^2 from 9.42 to 8.81 (2026-12-01, tree f708d1b).
UNROLL = ((1024, 4), (float("inf"), 8))
#: Groups of right-hand sides are made smaller until a launch has this many blocks, where it
#: can (two per multiprocessor of an H200): a few matrices are then solved by many blocks.
TARGET_BLOCKS = 264

_SOURCE = COMMON + r"""
// op(a) = m is lower triangular: m(i, j) = (tr ? a(j, i) : a(i, j)), conjugated with cj.
// mode 0: x = m^-1 b; mode 1: x = m^-H b; mode 2: x = m^-H m^-1 b (cho_solve, m = L); unit:
// unit diagonal. Block blockIdx.x solves columns c0 .. c0 + kc - 1 (groups of kg) of matrix
// blockIdx.x / groups; its solution columns xs[c * n + i] live in dynamic shared memory.
// A substitution ("pass") runs over panels of GP rows: forward from the top with
// g(r, j) = m(i0 + r, j), backward from the bottom with g(r, j) = conj(m(j, i0 + r)); the
// panel's rows get sum_j g(r, j) x_j over the solved j (the warps split the j range, lanes run
// along the contiguous axis), then warp c substitutes column c through the diagonal block.
// The rule of _triangular_xp and the flags as gl_small_trsm's (its comment), into the summary;
// NaN or Inf outside the triangle (SciPy's check_finite: checks bit 1) is flagged into the
// summary by the flat finiteness kernel before the launch (here a few blocks would read it all).
#define GP 32
#define KGM 4
#define NW (NT / 32)
#define RPW (GP / NW)
extern "C" __global__ void __launch_bounds__(NT)
gl_stream_trsm(const T* __restrict__ a, const T* __restrict__ bm, T* __restrict__ x,
               unsigned long long* __restrict__ summ, const int n, const int k,
               const long long sab, const long long sar, const long long sac,
               const long long sbb, const long long sbr, const long long sbc,
               const long long sxb, const long long sxr, const long long sxc,
               const int tr, const int cj, const int mode, const int unit,
               const int squared, const int kg, const int checks) {
    extern __shared__ __align__(16) unsigned char gl_dyn[];
    T* xs = reinterpret_cast<T*>(gl_dyn);
    __shared__ T dg[GP][GP + 1];
    __shared__ T part[NW][KGM][GP];
    __shared__ double red[3 + 2 * KGM][NW];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int groups = (k + kg - 1) / kg;
    const long long b = blockIdx.x / groups;
    const int c0 = (int)(blockIdx.x % groups) * kg;
    const int kc = min(kg, k - c0);
    const T* src = a + b * sab;
    const long long mr = tr ? sac : sar, mc = tr ? sar : sac;
    int mine = 0, minb = 0;
    double sc[KGM], mx[KGM];
#pragma unroll
    for (int c = 0; c < KGM; ++c) {
        sc[c] = 0.0;
        mx[c] = 0.0;
        if (c < kc) {
            for (int i = t; i < n; i += NT) {
                const T v = bm[b * sbb + i * sbr + (c0 + c) * sbc];
                if (!gl_fin(v)) minb = 1;
                sc[c] = gl_max(sc[c], gl_mag(v));
                xs[c * n + i] = v;
            }
        }
    }
    double dmax = 0.0, dmin = __longlong_as_double(0x7ff0000000000000LL);  // +inf
    double z = dmin;  // the first zero on the diagonal (+inf: none)
    const int panels = (n + GP - 1) / GP;
    const int first = mode == 1 ? 1 : 0, last = mode == 0 ? 0 : 1;
    for (int pass = first; pass <= last; ++pass) {
        const bool fw = pass == 0;
        const long long sr = fw ? mr : mc, sj = fw ? mc : mr;
        const bool cp = fw ? (cj != 0) : (cj == 0);
        const bool rfast = llabs(sr) <= llabs(sj);  // consecutive r are adjacent in memory
        for (int pi = 0; pi < panels; ++pi) {
            const int i0 = (fw ? pi : panels - 1 - pi) * GP, pr = min(GP, n - i0);
            const int j0 = fw ? 0 : i0 + pr, j1 = fw ? i0 : n;
            const T* rows = src + i0 * sr;
            for (int e = t; e < GP * GP; e += NT) {  // the diagonal block, the used triangle
                const int r = rfast ? (e & (GP - 1)) : e / GP;
                const int jj = rfast ? e / GP : (e & (GP - 1));
                T v = T(0);
                if (r < pr && jj < pr && (fw ? jj <= r : jj >= r)) {
                    v = rows[r * sr + (i0 + jj) * sj];
                    if (cp) v = gl_cj(v);
                    if (!gl_fin(v)) mine = 1;
                    if (r == jj && pass == first) {
                        const double d = gl_mag(v);
                        dmax = gl_max(dmax, d);
                        dmin = gl_min(dmin, d);
                        if (d == 0.0 && i0 + r < z) z = i0 + r;
                    }
                }
                dg[r][jj] = v;
            }
            if (rfast) {  // lane r: row i0 + r; the warps take every NW-th j
                T acc[KGM];
#pragma unroll
                for (int c = 0; c < KGM; ++c) acc[c] = T(0);
                const bool on = lane < pr;
                const T* rp = rows + lane * sr;
                for (int j = j0 + warp; j < j1; j += NW * UNR) {
                    T g[UNR];
#pragma unroll
                    for (int u = 0; u < UNR; ++u) {
                        const int ju = j + u * NW;
                        g[u] = (on && ju < j1) ? rp[ju * sj] : T(0);
                    }
#pragma unroll
                    for (int u = 0; u < UNR; ++u) {
                        const int ju = j + u * NW;
                        if (ju < j1) {
                            const T gv = cp ? gl_cj(g[u]) : g[u];
                            if (!gl_fin(gv)) mine = 1;
#pragma unroll
                            for (int c = 0; c < KGM; ++c)
                                if (c < kc) acc[c] += gv * xs[c * n + ju];
                        }
                    }
                }
#pragma unroll
                for (int c = 0; c < KGM; ++c) part[warp][c][lane] = acc[c];
            } else {  // warp w: rows w, w + NW, ...; lanes take every 32nd j, then a shuffle sum
                T acc[RPW][KGM];
#pragma unroll
                for (int q = 0; q < RPW; ++q)
#pragma unroll
                    for (int c = 0; c < KGM; ++c) acc[q][c] = T(0);
                for (int j = j0 + lane; j < j1; j += 32) {
                    T g[RPW];
#pragma unroll
                    for (int q = 0; q < RPW; ++q) {
                        const int r = warp + q * NW;
                        g[q] = r < pr ? rows[r * sr + j * sj] : T(0);
                    }
#pragma unroll
                    for (int q = 0; q < RPW; ++q) {
                        const T gv = cp ? gl_cj(g[q]) : g[q];
                        if (!gl_fin(gv)) mine = 1;
#pragma unroll
                        for (int c = 0; c < KGM; ++c)
                            if (c < kc) acc[q][c] += gv * xs[c * n + j];
                    }
                }
#pragma unroll
                for (int q = 0; q < RPW; ++q) {
#pragma unroll
                    for (int c = 0; c < KGM; ++c) {
                        T v = acc[q][c];
                        for (int h = 16; h > 0; h >>= 1) v += gl_xor(v, h, 32);
                        if (lane == 0) part[0][c][warp + q * NW] = v;
                    }
                }
            }
            __syncthreads();
            if (rfast) {  // fold the warps' partial sums into part[0]
                for (int e = t; e < KGM * GP; e += NT) {
                    const int c = e / GP, r = e & (GP - 1);
                    T s = T(0);
                    for (int w = 0; w < NW; ++w) s += part[w][c][r];
                    part[0][c][r] = s;
                }
                __syncthreads();
            }
            if (warp < kc) {  // warp c substitutes column c through the diagonal block
                const int c = warp, r = lane;
                T v = r < pr ? xs[c * n + i0 + r] - part[0][c][r] : T(0);
                const T dinv = (unit || r >= pr) ? T(1) : T(1) / dg[r][r];
                if (fw) {
#pragma unroll
                    for (int jj = 0; jj < GP; ++jj) {
                        if (jj < pr) {
                            const T xj = gl_shfl(v * dinv, jj, 32);
                            if (r == jj) v = xj; else if (r > jj) v -= dg[r][jj] * xj;
                        }
                    }
                } else {
#pragma unroll
                    for (int jj = GP - 1; jj >= 0; --jj) {
                        if (jj < pr) {
                            const T xj = gl_shfl(v * dinv, jj, 32);
                            if (r == jj) v = xj; else if (r < jj) v -= dg[r][jj] * xj;
                        }
                    }
                }
                if (r < pr) xs[c * n + i0 + r] = v;
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int c = 0; c < KGM; ++c) {
        if (c < kc) {
            for (int i = t; i < n; i += NT) {
                const T v = xs[c * n + i];
                x[b * sxb + i * sxr + (c0 + c) * sxc] = v;
                mx[c] = gl_max(mx[c], gl_mag(v));
            }
        }
    }
    // the block's figures: a shuffle fold per warp, then thread 0 over the warps
    double f[3 + 2 * KGM];
    f[0] = dmax; f[1] = dmin; f[2] = z;
#pragma unroll
    for (int c = 0; c < KGM; ++c) { f[3 + c] = sc[c]; f[3 + KGM + c] = mx[c]; }
#pragma unroll
    for (int q = 0; q < 3 + 2 * KGM; ++q) {
        for (int h = 16; h > 0; h >>= 1) {
            const double o = __shfl_xor_sync(0xffffffffu, f[q], h);
            f[q] = (q == 1 || q == 2) ? gl_min(f[q], o) : gl_max(f[q], o);
        }
        if (lane == 0) red[q][warp] = f[q];
    }
    const int abad = __syncthreads_or(mine);
    const int bbad = __syncthreads_or(minb);
    if (t != 0 || !(checks & 1)) return;
    for (int w = 1; w < NW; ++w) {
#pragma unroll
        for (int q = 0; q < 3 + 2 * KGM; ++q)
            f[q] = (q == 1 || q == 2) ? gl_min(f[q], red[q][w]) : gl_max(f[q], red[q][w]);
    }
    if (unit) { f[0] = 1.0; f[1] = 1.0; f[2] = __longlong_as_double(0x7ff0000000000000LL); }
    const double diag1 = f[0] / (f[1] > 0.0 ? f[1] : 1.0);
    double bd = squared ? diag1 * diag1 : diag1;
    const double dm = squared ? f[0] * f[0] : f[0];
#pragma unroll
    for (int c = 0; c < KGM; ++c)
        if (c < kc) bd = gl_max(bd, dm * (f[3 + c] > 0.0 ? f[3 + KGM + c] / f[3 + c] : 0.0));
    const unsigned long long flags = (abad ? 1ULL : 0ULL) | (bbad ? 2ULL : 0ULL)
                                     | (f[2] < 1e300 ? 4ULL : 0ULL);
    gl_summary(summ, flags, gl_order_bits(bd), 1, GL_NONE, (unsigned long long)gridDim.x);
}
"""


def shared_optin():
    """The shared memory a block may opt into on the current device, in all (an H200: 227
    KiB; 48 KiB where the attribute cannot be read)."""
    return int(attribute("MaxSharedMemoryPerBlockOptin", 48 * 1024))


def shared_limit():
    """The dynamic shared memory a block may take on the current device: :data:`MAX_SHARED`,
    or less where the device's opt-in limit per block leaves less beside the static part
    (a laptop GPU of compute capability 8.6 allows 99 KiB in all; an H200 227)."""
    return max(0, min(MAX_SHARED, shared_optin() - STATIC_SHARED))


def fits(n, k, dtype, limit=MAX_SHARED):
    """Whether a stack of order ``n`` with ``k`` right-hand sides in ``dtype`` can run the
    streamed kernel: one solution column of ``n`` entries in ``limit`` bytes of shared memory
    (:func:`shared_limit` on a device)."""
    dtype = np.dtype(dtype)
    return (dtype in KERNEL_TYPES and 0 < n and 0 < k <= MAX_RHS
            and n * dtype.itemsize <= limit and n * n < 2 ** 31)


def group(n, k, nb, dtype, limit=MAX_SHARED):
    """Right-hand sides per block: the most (up to :data:`GROUP`, and what ``limit`` bytes of
    shared memory hold) that still give :data:`TARGET_BLOCKS` blocks, else one.

    >>> group(512, 4, 200, "float64"), group(2048, 4, 8, "float64"), group(256, 2, 4096, "f")
    (3, 1, 2)
    """
    most = min(k, GROUP, limit // (n * np.dtype(dtype).itemsize))
    for kg in range(most, 1, -1):
        if nb * -(-k // kg) >= TARGET_BLOCKS:
            return kg
    return 1


def _threads(dtype):
    # complex128: 256 threads (the partial sums of 16 warps would not fit static shared memory)
    return 256 if np.dtype(dtype) == np.complex128 else 512


def launch_args(x, n, nb, *views):
    """``(kernel, grid, block, strides, kg, shared)`` of the kernel for the ``(B, n, k)``
    solution ``x`` of ``nb`` matrices: the element strides of the ``(B, p, q)`` ``views``
    flattened, the group size (the argument before ``checks``) and the launch's dynamic
    shared memory, as an engine keeps them per layout."""
    k = x.shape[-1]
    limit = shared_limit()
    kg = group(n, k, nb, x.dtype, limit)
    t, r = KERNEL_TYPES[np.dtype(x.dtype)]
    threads = _threads(x.dtype)
    loads = next(u for top, u in UNROLL if n <= top)
    kern = raw_kernel("gl_stream_trsm", _SOURCE, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNT={threads}", f"-DUNR={loads}"),
                      shared_bytes=limit)
    strides = tuple(s for v in views for s in strides_of(v))
    return (kern, (nb * -(-k // kg),), (threads,), strides, np.int32(kg),
            n * kg * np.dtype(x.dtype).itemsize)


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize, finite=False):
    """:func:`._fused_cuda.trsm`'s solve (same arguments and summary) by the streamed kernel:
    with ``finite``, :func:`._fused_cuda.flag_before`, then one launch; no synchronization."""
    nb, n, _ = x.shape
    kern, grid, block, st, kg, shared = launch_args(x, n, nb, a3, b3, x)
    if finite and summarize:
        flag_before(a3, summ)
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(x.shape[-1]), *st,
                       np.int32(bool(tr)), np.int32(bool(cj)), np.int32(mode),
                       np.int32(bool(unit)), np.int32(bool(squared)), kg,
                       checks(summarize, False)), shared_mem=shared)
