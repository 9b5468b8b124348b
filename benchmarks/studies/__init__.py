"""One-off investigations: ``python -m benchmarks NAME`` (``NAME`` a module here)."""
