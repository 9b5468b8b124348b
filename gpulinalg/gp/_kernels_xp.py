"""Kernel matrices and log-marginal-likelihood gradients of scikit-learn kernels, on any array
package (CuPy on the GPU, NumPy on the CPU).

:func:`compile_kernel` turns a scikit-learn kernel built from ``RBF``, ``Matern`` (``nu`` in
0.5, 1.5, 2.5, inf), ``RationalQuadratic``, ``WhiteKernel``, ``ConstantKernel``, ``DotProduct``,
``Sum`` and ``Product`` into a :class:`KernelPlan`; any other kernel gives ``None`` and the caller
evaluates the scikit-learn kernel itself on the CPU.

The plan never forms the ``n x n x p`` gradient tensor. The log marginal likelihood needs only
``g_k = 1/2 sum_ij W_ij dK_ij/dtheta_k`` with ``W = alpha alpha^T - K^-1``, so
:meth:`KernelPlan.contract` walks row blocks of ``W`` and reduces each block against the
kernel's derivatives computed on the fly. Pairwise squared distances come from one GEMM per
block, ``|x|^2 + |y|^2 - 2 x y^T``, on coordinates centred on the training mean (distances are
translation invariant; centring limits the cancellation of the GEMM form).
"""

import math

import numpy as np

from .._runtime.validation import namespace

__all__ = ["compile_kernel", "KernelPlan", "BLOCK_ELEMENTS", "PREDICT_BLOCK_ELEMENTS"]

#: Entries of one row block (rows x columns) of the kernel or gradient work (512 MiB in float64).
BLOCK_ELEMENTS = 1 << 26
#: Entries of one block of query points x training points in ``predict`` (2 GiB in float64):
#: larger than :data:`BLOCK_ELEMENTS` so that each triangular solve has enough right-hand sides.
PREDICT_BLOCK_ELEMENTS = 1 << 28


class _Block:
    """A block ``k(xs, ys)``. With ``same``, ``xs`` and ``ys`` are parts of one ``X`` (``k(X)``,
    White noise on) and row ``k`` of the block is the point of column ``k + i0``."""

    def __init__(self, xs, ys, i0, same, shift):
        self.xs, self.ys, self.i0, self.same, self.shift = xs, ys, i0, same, shift
        self.cache = {}

    def diag_index(self):
        xp = namespace(self.xs)
        lo, hi = max(0, -self.i0), min(self.xs.shape[0], self.ys.shape[0] - self.i0)
        k = xp.arange(lo, max(lo, hi))
        return k, k + self.i0

    def diagonal(self, a):
        """The entries ``(k, k + i0)`` of the C-contiguous block ``a`` as a strided 1-D view
        (one kernel to read or write them, no index arrays); ``None`` if ``a`` is not
        C-contiguous."""
        if not a.flags.c_contiguous:
            return None
        m = a.shape[1]
        lo, hi = max(0, -self.i0), min(a.shape[0], m - self.i0)
        if hi <= lo:
            return a.reshape(-1)[:0]
        start = lo * m + lo + self.i0
        return a.reshape(-1)[start:start + (hi - lo - 1) * (m + 1) + 1:m + 1]

    def set_diagonal(self, a, value):
        d = self.diagonal(a)
        if d is not None:
            d[...] = value
        else:
            a[self.diag_index()] = value


def _total(m):
    """Sum of all entries of a block, as a 0-d array: row sums first, so that the reduction
    of a large block spreads over the whole GPU (a single full reduction runs in one thread
    block with CuPy's generic reduction)."""
    return m.sum(axis=-1).sum() if m.ndim == 2 else m.sum()


def _weighted_sq_diff_sums(mh, zx, zy):
    """``[sum_ij mh_ij (zx_id - zy_jd)^2 for each d]`` as one array, from a single GEMM:
    ``(u - v)^2 = u^2 - 2 u v + v^2`` gives ``zx^2 . (mh 1) - 2 zx . (mh zy) + mh zy^2``, so
    the block ``mh`` is read once for all ``d`` (``zx``, ``zy`` centred, as for the distances).
    """
    xp = namespace(mh)
    d = zx.shape[1]
    p = mh @ xp.concatenate([zy, zy * zy, xp.ones((zy.shape[0], 1), dtype=zy.dtype)], axis=1)
    return ((zx * zx) * p[:, 2 * d:]).sum(axis=0) + p[:, d:2 * d].sum(axis=0) \
        - 2.0 * (zx * p[:, :d]).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# leaves


def _is_fixed(bounds):
    return isinstance(bounds, str) and bounds == "fixed"  # scikit-learn's own test


class _Leaf:
    #: The kernel's hyperparameter names in scikit-learn's order (sorted, as ``dir`` lists them).
    names: tuple[str, ...] = ()

    def __init__(self, kernel):
        self.free = [name for name in self.names
                     if not _is_fixed(getattr(kernel, f"{name}_bounds"))]

    def contract(self, blk, m):
        """Per free hyperparameter (sklearn's order), ``sum(M * dK/dlog(theta))`` as 0-d arrays."""
        parts = self._grads(blk, m)
        return [g for name in self.free for g in parts[name]]


class _Constant(_Leaf):
    names = ("constant_value",)

    def __init__(self, kernel):
        super().__init__(kernel)
        self.c = float(kernel.constant_value)

    def value(self, blk):
        return self.c  # a scalar: sums and products broadcast it

    def diag(self, x):
        return namespace(x).full(x.shape[0], self.c, dtype=x.dtype)

    def _grads(self, blk, m):
        return {"constant_value": [self.c * _total(m)]}


class _White(_Leaf):
    names = ("noise_level",)

    def __init__(self, kernel):
        super().__init__(kernel)
        self.noise = float(kernel.noise_level)

    def value(self, blk):
        if not blk.same:
            return 0.0  # k(X, Y) of white noise is zero (scikit-learn's convention)
        xp = namespace(blk.xs)
        out = xp.zeros((blk.xs.shape[0], blk.ys.shape[0]), dtype=blk.xs.dtype)
        blk.set_diagonal(out, self.noise)
        return out

    def diag(self, x):
        return namespace(x).full(x.shape[0], self.noise, dtype=x.dtype)

    def _grads(self, blk, m):
        d = blk.diagonal(m)
        return {"noise_level": [self.noise * (d if d is not None else m[blk.diag_index()]).sum()]}


class _DotProduct(_Leaf):
    names = ("sigma_0",)

    def __init__(self, kernel):
        super().__init__(kernel)
        self.s2 = float(kernel.sigma_0) ** 2

    def value(self, blk):
        return blk.xs @ blk.ys.T + self.s2

    def diag(self, x):
        return (x * x).sum(axis=1) + self.s2

    def _grads(self, blk, m):
        return {"sigma_0": [2.0 * self.s2 * _total(m)]}


class _Stationary(_Leaf):
    """A kernel of the scaled distance ``r = |(x - y) / l|``; ``dK/dlog l_d = h(r) D_d^2``."""

    names: tuple[str, ...] = ("length_scale",)

    def __init__(self, kernel, n_features):
        super().__init__(kernel)
        ls = np.atleast_1d(np.asarray(kernel.length_scale, dtype=np.float64))
        self.ls = ls if ls.size > 1 else float(ls[0])
        self.anisotropic = ls.size > 1
        self._arrays = {}

    def __getstate__(self):
        return {**self.__dict__, "_arrays": {}}

    def r2(self, blk):
        key = ("r2", id(self))
        if key not in blk.cache:
            zx = (blk.xs - blk.shift) / self._ls_like(blk.xs)
            zy = (blk.ys - blk.shift) / self._ls_like(blk.xs)
            r2 = (-2.0 * zx) @ zy.T  # scaling the thin factor, not the block
            r2 += (zx * zx).sum(axis=1)[:, None]
            r2 += (zy * zy).sum(axis=1)[None, :]
            namespace(r2).maximum(r2, 0.0, out=r2)
            if blk.same:
                blk.set_diagonal(r2, 0.0)
            blk.cache[key] = r2
        return blk.cache[key]

    def _ls_like(self, x):
        """The length scales as an array of ``x``'s package (uploaded once per plan and
        package, dtype and device; not pickled)."""
        if not self.anisotropic:
            return self.ls
        key = (type(x), x.dtype, str(getattr(x, "device", "")))
        got = self._arrays.get(key)
        if got is None:
            got = self._arrays[key] = namespace(x).asarray(self.ls, dtype=x.dtype)
        return got

    def diag(self, x):
        return namespace(x).ones(x.shape[0], dtype=x.dtype)

    def value(self, blk):
        key = ("K", id(self))
        if key not in blk.cache:
            blk.cache[key] = self.f(self.r2(blk))
        return blk.cache[key]

    def h_of(self, blk):
        return self.h(self.r2(blk))

    def _length_scale_grads(self, blk, m):
        r2 = self.r2(blk)
        mh = m * self.h_of(blk)
        if not self.anisotropic:
            return [_total(mh * r2)]
        ls = self._ls_like(blk.xs)
        zx, zy = (blk.xs - blk.shift) / ls, (blk.ys - blk.shift) / ls
        return list(_weighted_sq_diff_sums(mh, zx, zy))

    def _grads(self, blk, m):
        return {"length_scale": self._length_scale_grads(blk, m)}


class _RBF(_Stationary):
    def f(self, r2):
        xp = namespace(r2)
        return xp.exp(-0.5 * r2)

    h = f

    def h_of(self, blk):
        return self.value(blk)  # dK/dlog l_d = K D_d^2


class _Matern05(_Stationary):
    def f(self, r2):
        xp = namespace(r2)
        return xp.exp(-xp.sqrt(r2))

    def h(self, r2):
        xp = namespace(r2)
        r = xp.sqrt(r2)
        pos = r > 0
        return xp.where(pos, xp.exp(-r) / xp.where(pos, r, 1.0), 0.0)


class _Matern15(_Stationary):
    def f(self, r2):
        xp = namespace(r2)
        s = xp.sqrt(3.0 * r2)
        return (1.0 + s) * xp.exp(-s)

    def h(self, r2):
        xp = namespace(r2)
        return 3.0 * xp.exp(-xp.sqrt(3.0 * r2))


class _Matern25(_Stationary):
    def f(self, r2):
        xp = namespace(r2)
        s = xp.sqrt(5.0 * r2)
        return (1.0 + s + s * s / 3.0) * xp.exp(-s)

    def h(self, r2):
        xp = namespace(r2)
        s = xp.sqrt(5.0 * r2)
        return (5.0 / 3.0) * (1.0 + s) * xp.exp(-s)


class _RationalQuadratic(_Stationary):
    names = ("alpha", "length_scale")

    def __init__(self, kernel, n_features):
        super().__init__(kernel, n_features)
        self.a = float(kernel.alpha)

    def f(self, r2):
        return (1.0 + r2 / (2.0 * self.a)) ** -self.a

    def h(self, r2):
        base = 1.0 + r2 / (2.0 * self.a)
        return base ** (-self.a - 1.0)  # K / base

    def _grads(self, blk, m):
        xp = namespace(m)
        r2 = self.r2(blk)
        base = 1.0 + r2 / (2.0 * self.a)
        k = base ** -self.a
        out = {"length_scale": [_total(m * k * r2 / base)]}
        if "alpha" in self.free:
            out["alpha"] = [_total(m * k * (-self.a * xp.log(base) + r2 / (2.0 * base)))]
        return out


# ---------------------------------------------------------------------------------------------
# operators


class _Sum:
    def __init__(self, k1, k2):
        self.k1, self.k2 = k1, k2

    def value(self, blk):
        return self.k1.value(blk) + self.k2.value(blk)

    def diag(self, x):
        return self.k1.diag(x) + self.k2.diag(x)

    def contract(self, blk, m):
        return self.k1.contract(blk, m) + self.k2.contract(blk, m)


class _Product(_Sum):
    def value(self, blk):
        return self.k1.value(blk) * self.k2.value(blk)

    def diag(self, x):
        return self.k1.diag(x) * self.k2.diag(x)

    def contract(self, blk, m):
        return (self.k1.contract(blk, m * self.k2.value(blk))
                + self.k2.contract(blk, m * self.k1.value(blk)))


def _noise_free_diag(node, x):
    """The diagonal of ``node``'s ``k(x, x)`` (``WhiteKernel`` zero), shape ``(n,)``."""
    if isinstance(node, _Sum):  # _Product included
        a, b = _noise_free_diag(node.k1, x), _noise_free_diag(node.k2, x)
        return a * b if isinstance(node, _Product) else a + b
    if isinstance(node, _White):
        return namespace(x).zeros(x.shape[0], dtype=x.dtype)
    return node.diag(x)


_MATERN = {0.5: _Matern05, 1.5: _Matern15, 2.5: _Matern25, math.inf: _RBF}


def _node(kernel, n_features):
    from sklearn.gaussian_process import kernels as K
    kind = type(kernel)
    if kind in (K.Sum, K.Product):
        k1, k2 = _node(kernel.k1, n_features), _node(kernel.k2, n_features)
        if k1 is None or k2 is None:
            return None
        return (_Sum if kind is K.Sum else _Product)(k1, k2)
    simple = {K.ConstantKernel: _Constant, K.WhiteKernel: _White, K.DotProduct: _DotProduct}
    if kind in simple:
        return simple[kind](kernel)
    if kind is K.Matern:
        leaf = _MATERN.get(float(kernel.nu))
    else:
        leaf = {K.RBF: _RBF, K.RationalQuadratic: _RationalQuadratic}.get(kind)
    if leaf is None:
        return None
    ls = np.atleast_1d(kernel.length_scale)
    if ls.ndim != 1 or ls.size not in (1, n_features) or (ls.size > 1 and
                                                         leaf is _RationalQuadratic):
        return None  # let scikit-learn raise its own error
    return leaf(kernel, n_features)


class KernelPlan:
    """A scikit-learn kernel, evaluated in row blocks on NumPy or CuPy arrays.

    Parameters
    ----------
    root : node
        The compiled kernel tree (see :func:`compile_kernel`).
    n_theta : int
        Length of the kernel's ``theta``.
    block_elements : int
        Entries of one row block of the kernel matrix (its tiles: ``k(x)`` of any size is
        built, checked and contracted block by block into one ``n x n`` array).
    predict_elements : int
        Entries of one block of query points in ``predict`` (cross-kernel and triangular
        solve).
    """

    def __init__(self, root, n_theta, block_elements=BLOCK_ELEMENTS,
                 predict_elements=PREDICT_BLOCK_ELEMENTS):
        self.root, self.n_theta = root, n_theta
        self.block_elements, self.predict_elements = int(block_elements), int(predict_elements)
        if self.block_elements < 1 or self.predict_elements < 1:
            raise ValueError("block_elements and predict_elements must be >= 1, got "
                             f"{block_elements!r}, {predict_elements!r}")

    def _rows(self, n, m):
        step = max(1, self.block_elements // max(m, 1))
        return [(i, min(i + step, n)) for i in range(0, n, step)]

    def matrix(self, x, y=None, shift=None, dtype=None):
        """``k(x, y)`` of shape ``(n, m)`` (``k(x)`` with White noise when ``y`` is None),
        stored in ``dtype`` (default ``x``'s; each row block is computed in ``x``'s dtype,
        then rounded into the result)."""
        xp = namespace(x)
        same, y = y is None, x if y is None else y
        shift = x.mean(axis=0) if shift is None else shift
        dtype = x.dtype if dtype is None else np.dtype(dtype)
        rows = self._rows(x.shape[0], y.shape[0])
        if len(rows) == 1:  # one block: its value is already a fresh array of the right shape
            value = self.root.value(_Block(x, y, 0, same, shift))
            if getattr(value, "shape", None) == (x.shape[0], y.shape[0]) and \
                    value.flags.c_contiguous:
                return value if value.dtype == dtype else value.astype(dtype)
        out = xp.empty((x.shape[0], y.shape[0]), dtype=dtype)
        for i0, i1 in rows:
            out[i0:i1] = self.root.value(_Block(x[i0:i1], y, i0, same, shift))
        return out

    def product(self, x, v, shift=None):
        """``k(x) @ v`` (White noise included) for ``v`` of shape ``(n,)`` or ``(n, t)``, with
        ``k(x)`` made row block by row block in ``x``'s dtype and never stored whole: what
        the mixed-precision solves (:mod:`._mixed_xp`) refine against."""
        xp = namespace(x)
        shift = x.mean(axis=0) if shift is None else shift
        n = x.shape[0]
        out = xp.empty(v.shape, dtype=np.result_type(x.dtype, v.dtype))
        for i0, i1 in self._rows(n, n):
            block = self.root.value(_Block(x[i0:i1], x, i0, True, shift))
            out[i0:i1] = xp.broadcast_to(xp.asarray(block, dtype=x.dtype), (i1 - i0, n)) @ v
        return out

    def diag(self, x, white=True):
        """The diagonal of ``k(x)``, shape ``(n,)``; with ``white=False`` that of the
        cross-kernel ``k(x, x)``, where ``WhiteKernel`` is zero (scikit-learn's convention):
        the noise-free part that a low-rank preconditioner factors."""
        return self.root.diag(x) if white else _noise_free_diag(self.root, x)

    def contract(self, x, w_rows, shift=None):
        """``g_k = sum_ij W_ij dK_ij/dlog(theta_k)`` for ``K = k(x)``, shape ``(n_theta,)``.

        ``w_rows(i0, i1)`` returns rows ``i0:i1`` of the weight matrix ``W``.
        """
        xp = namespace(x)
        shift = x.mean(axis=0) if shift is None else shift
        total = xp.zeros(self.n_theta, dtype=x.dtype)
        if self.n_theta == 0:
            return total
        for i0, i1 in self._rows(x.shape[0], x.shape[0]):
            total += self.contract_block(x[i0:i1], x, w_rows(i0, i1), offset=i0, shift=shift)
        return total

    def contract_block(self, xs, ys, w, *, offset, shift):
        """``sum_ij w_ij dK_ij/dlog(theta)`` over the block ``K = k(xs, ys)`` of ``k(X)``, where
        row ``i`` of the block is the point of its column ``i + offset``; shape ``(n_theta,)``."""
        xp = namespace(xs)
        if self.n_theta == 0:
            return xp.zeros(0, dtype=xs.dtype)
        parts = self.root.contract(_Block(xs, ys, offset, True, shift), w)
        return xp.stack([xp.asarray(p, dtype=xs.dtype) for p in parts])


def compile_kernel(kernel, n_features, n_theta=None, *, block_elements=BLOCK_ELEMENTS,
                   predict_elements=PREDICT_BLOCK_ELEMENTS):
    """Return a :class:`KernelPlan` for ``kernel`` on ``n_features``-D inputs, or ``None``.

    ``n_theta`` (the length of ``kernel.theta``) saves computing it when the caller knows it.
    ``block_elements`` and ``predict_elements`` size the plan's tiles (see
    :class:`KernelPlan`); the defaults suit every ``n``, smaller ones run the same code in
    more tiles.
    ``None`` means some part of the kernel has no array-generic evaluator here (another kernel
    class, a subclass, Matern with another ``nu``, a length scale of the wrong size); the caller
    then uses the scikit-learn kernel's own ``__call__``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    >>> k = 2.0 * RBF(length_scale=[1.0, 3.0]) + WhiteKernel(0.1)
    >>> x = np.random.default_rng(0).standard_normal((30, 2))
    >>> plan = compile_kernel(k, 2)
    >>> bool(np.allclose(plan.matrix(x), k(x)))
    True
    >>> _, grad = k(x, eval_gradient=True)
    >>> w = np.random.default_rng(1).standard_normal((30, 30))
    >>> bool(np.allclose(plan.contract(x, lambda i0, i1: w[i0:i1]),
    ...                  np.einsum("ij,ijk->k", w, grad)))
    True
    """
    root = _node(kernel, n_features)
    if root is None:
        return None
    return KernelPlan(root, len(kernel.theta) if n_theta is None else int(n_theta),
                      block_elements, predict_elements)


# ---------------------------------------------------------------------------------------------
# the fused form: [ConstantKernel *] stationary [+ WhiteKernel]

#: Stationary leaves of the fused GPU kernels, by the code the kernels' source takes.
FUSED_KINDS = {_RBF: 0, _Matern05: 1, _Matern15: 2, _Matern25: 3}
#: Largest input dimension of the fused kernels (the point's coordinates live in registers).
FUSED_MAX_D = 32


class Fused:
    """A kernel ``c * s(r) + w I`` (``s`` an RBF or Matern leaf, ``c`` and ``w`` optional),
    the form the GPU builds and differentiates in one pass each (:mod:`._fused_cuda`).

    ``kind``: the leaf's code in :data:`FUSED_KINDS`; ``c``, ``white``: the constant and the
    white-noise level (1.0 and 0.0 when absent); ``inv_ls``: inverse length scales, one per
    input dimension; ``order``: the free hyperparameters in ``theta``'s order, each
    ``"c"``, ``"ls"`` (all length scales, or the one) or ``"w"``; ``anisotropic``: one length
    scale per dimension.
    """

    __slots__ = ("kind", "c", "white", "inv_ls", "order", "anisotropic")

    def gradient(self, acc):
        """``theta``'s gradient from the fused contraction's sums ``acc`` (host, float64):
        ``acc[0] = sum W_ij c s_ij``, ``acc[1 + d] = sum W_ij c h_ij (z_id - z_jd)^2``,
        ``acc[-1] = trace(W)``; ``W = alpha alpha^T - t K^-1`` and each gradient entry is half
        its sum."""
        d = self.inv_ls.shape[0]
        parts = {"c": acc[:1], "w": self.white * acc[d + 1:d + 2],
                 "ls": acc[1:d + 1] if self.anisotropic else acc[1:d + 1].sum(keepdims=True)}
        if not self.order:
            return np.zeros(0)
        return 0.5 * np.concatenate([parts[name] for name in self.order])


def fused_form(plan, n_features):
    """The :class:`Fused` form of ``plan``'s kernel, or ``None`` when it has another shape."""
    root = plan.root if plan is not None else None
    white = None
    if isinstance(root, _Sum) and not isinstance(root, _Product):
        if isinstance(root.k2, _White):
            root, white = root.k1, root.k2
        elif isinstance(root.k1, _White):
            root, white = root.k2, root.k1
        else:
            return None
    const, leaves = None, [root]
    if isinstance(root, _Product):
        leaves = [root.k1, root.k2]
        const = next((k for k in leaves if isinstance(k, _Constant)), None)
        if const is None:
            return None
    stat = [k for k in leaves if type(k) in FUSED_KINDS]
    if len(stat) != 1 or len(leaves) - len(stat) != (const is not None):
        return None
    s = stat[0]
    if not 1 <= n_features <= FUSED_MAX_D:
        return None
    f = Fused()
    f.kind, f.anisotropic = FUSED_KINDS[type(s)], s.anisotropic
    f.c = const.c if const is not None else 1.0
    f.white = white.noise if white is not None else 0.0
    f.inv_ls = 1.0 / np.broadcast_to(np.asarray(s.ls, dtype=np.float64), (n_features,))
    names = {id(s): "ls", id(const): "c", id(white): "w"}
    order = [k for k in _leaves(plan.root)]
    f.order = [names[id(k)] for k in order if k.free]
    return f


def _leaves(node):
    if isinstance(node, _Sum):
        return _leaves(node.k1) + _leaves(node.k2)
    return [node]
