"""decomp's engines for the other submodules: the one place ``gp`` reaches into decomp.

These are decomp's internal layers (arrays already on their side, no validation, no dispatch): a
caller that has already been dispatched must not go through decomp's public functions, which
would validate and dispatch a second time. The names say where each runs.
"""

from ._kernels._cholinv_cuda import gram_lower, tri_inverse, tri_inverse_scratch
from ._kernels._policy_cuda import enabled as custom_kernels_enabled
from ._tiles._graph_dask import new_array, tokenize
from .cholesky import _cholesky_dask as cholesky_dask
from .cholesky._cholesky_cuda import cho_solve as cho_solve_cuda
from .cholesky._cholesky_cuda import cholesky as cholesky_cuda
from .cholesky._cholesky_cuda import logdet as logdet_cuda
from .cholesky._cholesky_grad import factor_backward as cholesky_factor_backward
from .cholesky._cholesky_host import cho_solve as cho_solve_host
from .cholesky._cholesky_host import cholesky as cholesky_host
from .cholesky._cholesky_host import logdet as logdet_host
from .triangular._triangular_host import solve_triangular as solve_triangular_host
from .triangular._triangular_cuda import solve_triangular as solve_triangular_cuda

__all__ = ["cho_solve_cuda", "cho_solve_host", "cholesky_cuda", "cholesky_dask", "cholesky_host",
           "cholesky_factor_backward",
           "custom_kernels_enabled",
           "gram_lower", "logdet_cuda", "logdet_host", "new_array", "solve_triangular_cuda",
           "solve_triangular_host", "tokenize", "tri_inverse", "tri_inverse_scratch"]
