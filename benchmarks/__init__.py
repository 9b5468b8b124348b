"""gpulinalg's benchmarks: ``python -m benchmarks SUITE [--json PATH] [--quick]``."""
