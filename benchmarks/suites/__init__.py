"""Published suites: ``python -m benchmarks NAME`` (``NAME`` a module here but
``decomp_kernels``, the ``kernels`` section of ``decomp_batched``)."""
