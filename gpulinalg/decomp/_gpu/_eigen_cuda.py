"""cuSOLVER's symmetric / Hermitian eigensolvers, as methods of a :class:`Solver`: ``Xsyevd``
(all eigenpairs), ``Xsyevdx`` (a subset by index or value), the legacy ``<t>sygvd`` /
``<t>sygvdx`` (generalized problems; ``he`` for complex, from the routine table) and
``<t>syevjBatched`` (stacks of matrices up to 32 x 32).

Runs inside a dispatcher GPU function, as :mod:`._cusolver_cuda` does."""

import numpy as np

from ._cusolver_cuda import Solver, _dn, _jobz, _uplo

__all__ = ["EigenSolver", "SYEVJ_BATCHED_MAX"]

#: ``syevjBatched`` takes matrices up to 32 x 32.
SYEVJ_BATCHED_MAX = 32


class EigenSolver(Solver):
    """A :class:`Solver` with the eigensolvers (same life cycle and ``info`` slots)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._syevj_params = []

    def __exit__(self, *exc):
        self._destroy_syevj()
        return super().__exit__(*exc)

    def _destroy_syevj(self):
        for params in self._syevj_params:
            _dn().destroy_syevj_info(params)
        self._syevj_params.clear()

    def check(self, what, also=None):
        """:meth:`Solver.check`, then the Jacobi parameter objects are destroyed."""
        try:
            return super().check(what, also)
        finally:
            self._destroy_syevj()

    def syevd(self, a, w, vectors, lower, i=0):
        """Eigenvalues (ascending, into ``w``) and, with ``vectors``, eigenvectors (over ``a``)
        of the column-major Hermitian ``a``, by divide and conquer (``Xsyevd``)."""
        dn, r = _dn(), self.r
        n = a.shape[0]
        args = (self.handle, self.params, _jobz(vectors), _uplo(lower), n, r.cuda, a.data.ptr,
                max(n, 1), r.cuda_real, w.data.ptr, r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("syevd", vectors, lower, n),
                                             dn.xsyevd_buffer_size, args)
        dn.xsyevd(*args, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))

    def syevdx(self, a, w, vectors, lower, index=None, value=None, i=0):
        """The eigenpairs of ``a`` with 0-based indices ``index = (lo, hi)`` or eigenvalues in
        ``value = (vl, vu]`` (``Xsyevdx``): their count, read on the host; the values go into
        the head of ``w``, the vectors over the first columns of ``a``."""
        from nvmath.bindings import cusolver
        dn, r = _dn(), self.r
        n = a.shape[0]
        rdt = np.empty(0, self.dtype).real.dtype
        bounds = np.array(value if value is not None else (0, 0), dtype=rdt)
        il, iu = (index[0] + 1, index[1] + 1) if index is not None else (1, 1)
        rng = cusolver.EigRange.I if index is not None else cusolver.EigRange.V
        meig = np.zeros(1, dtype=np.int64)
        head = (self.handle, self.params, _jobz(vectors), int(rng), _uplo(lower), n, r.cuda,
                a.data.ptr, max(n, 1), bounds.ctypes.data, bounds.ctypes.data + rdt.itemsize,
                il, iu)
        tail = (r.cuda_real, w.data.ptr, r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(
            ("syevdx", vectors, lower, n, int(rng)), dn.xsyevdx_buffer_size,
            head + (meig.ctypes.data,) + tail)
        found = dn.xsyevdx(*head, *tail, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))
        self._keep.append(bounds)
        return int(found)

    def sygvd(self, a, b, w, itype, vectors, lower, i=0):
        """The generalized problem of type ``itype`` (1: ``A x = l B x``, 2: ``A B x = l x``,
        3: ``B A x = l x``) with Hermitian positive definite ``b`` (legacy ``<t>sygvd`` /
        ``<t>hegvd``): eigenvalues into ``w``, vectors over ``a``, B's Cholesky factor over
        ``b``; ``info > n`` names B's failing leading minor."""
        r = self.r
        n = a.shape[0]
        args = (self.handle, int(itype), _jobz(vectors), _uplo(lower), n, a.data.ptr, max(n, 1),
                b.data.ptr, max(n, 1), w.data.ptr)
        work = self._lwork(a, r.legacy(r.herm + "gvd_buffer_size")(*args))
        r.legacy(r.herm + "gvd")(*args, work.data.ptr, work.size, self._info(i))
        self._keep.append(work)

    def sygvdx(self, a, b, w, itype, vectors, lower, index=None, value=None, i=0):
        """:meth:`sygvd` for the eigenpairs with 0-based indices ``index`` or eigenvalues in
        ``value = (vl, vu]`` (legacy ``<t>sygvdx`` / ``<t>hegvdx``): their count (host)."""
        from nvmath.bindings import cusolver
        r = self.r
        n = a.shape[0]
        vl, vu = (float(x) for x in value) if value is not None else (0.0, 0.0)
        il, iu = (index[0] + 1, index[1] + 1) if index is not None else (1, 1)
        rng = cusolver.EigRange.I if index is not None else cusolver.EigRange.V
        meig = np.zeros(1, dtype=np.int32)
        args = (self.handle, int(itype), _jobz(vectors), int(rng), _uplo(lower), n, a.data.ptr,
                max(n, 1), b.data.ptr, max(n, 1), vl, vu, il, iu, meig.ctypes.data, w.data.ptr)
        work = self._lwork(a, r.legacy(r.herm + "gvdx_buffer_size")(*args))
        r.legacy(r.herm + "gvdx")(*args, work.data.ptr, work.size, self._info(i))
        self._keep.append(work)
        return int(meig[0])

    def syevj_batched(self, w, vals, vectors, lower):
        """Jacobi eigensolver of every ``n x n`` matrix of ``w`` (``n <= 32``, column-major,
        uniform stride) in one ``<t>syevjBatched`` call: ascending eigenvalues into ``vals``
        (B, n), vectors over ``w``; ``info`` slot ``i`` is matrix ``i``."""
        dn, r = _dn(), self.r
        nb, n, _ = w.shape
        params = dn.create_syevj_info()
        self._syevj_params.append(params)
        dn.xsyevj_set_sort_eig(params, 1)
        args = (self.handle, _jobz(vectors), _uplo(lower), n, w.data.ptr, max(n, 1),
                vals.data.ptr)
        stem = r.herm + "evj_batched"
        work = self._lwork(w, r.legacy(stem + "_buffer_size")(*args, params, nb))
        r.legacy(stem)(*args, work.data.ptr, work.size, self.info.data.ptr, params, nb)
        self._keep.append(work)
