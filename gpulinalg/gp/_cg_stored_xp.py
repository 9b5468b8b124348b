"""The matrix-free solver's products from a kernel matrix stored for one solve, where the
device holds it (``cg_options["products"]``, the GPU engine's ``cg_operator``): each ``K v``
one matrix product instead of every entry made anew. Written once for any array module; the
engine builds the matrix and says where the gradient's contraction runs.
"""

import numpy as np

from .._runtime.validation import namespace

__all__ = ["StoredOperator"]


class StoredOperator:
    """``v -> (k + diag(d)) v`` in float64 from the stored ``k`` (``n x n``, float32 or
    float64; ``v`` rounded into its dtype for the product) and the diagonal ``d`` kept apart
    in float64 (a number, or one per point); the gradient's contraction by
    ``gradient(left, right, pre, scale, k)``, which may take ``k``'s memory for its weights:
    it is the operator's last call (products after it raise).

    Examples
    --------
    >>> import numpy as np
    >>> k = np.array([[2.0, 1.0], [1.0, 2.0]])
    >>> op = StoredOperator(k.astype(np.float32), 0.5, None)
    >>> op(np.array([1.0, 1.0])), op.route
    (array([3.5, 3.5]), 'stored float32')
    """

    def __init__(self, k, diag, gradient):
        self.k, self.diag, self.gradient = k, diag, gradient
        #: What ``last_run().details["cg_products"]`` says.
        self.route = f"stored {np.dtype(k.dtype).name}"

    def __call__(self, v):
        if self.k is None:
            raise RuntimeError("the stored kernel matrix was given up to the gradient")
        xp = namespace(v)
        v2 = v.reshape(v.shape[0], -1)
        out = xp.matmul(self.k, v2.astype(self.k.dtype, copy=False))
        out = out.astype(np.float64, copy=False)
        d = self.diag
        out += (d[:, None] if getattr(d, "ndim", 0) else d) * v2
        return out.reshape(v.shape)

    def lml_gradient(self, left, right, pre, scale):
        """:meth:`~._mixed_xp.Operator.lml_gradient`'s answer, by ``gradient``; the stored
        matrix is given up to it."""
        k, self.k = self.k, None
        return self.gradient(left, right, pre, scale, k)
