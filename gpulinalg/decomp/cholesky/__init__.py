"""Cholesky: ``cholesky``, ``cho_factor``, ``cho_solve``, ``logdet_cholesky`` (GPU, host and Dask
engines)."""
