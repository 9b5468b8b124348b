"""Truncated and randomized SVD: ``truncated_svd``, its sketches, out-of-core streaming and Dask
engines."""
