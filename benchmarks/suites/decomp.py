"""``python -m benchmarks decomp``: the dense factorizations, then the low-rank/PCA/out-of-core
cases."""


def run(quick=False):
    from benchmarks.suites import decomp_dense, decomp_lowrank
    return decomp_dense.run(quick) + decomp_lowrank.run(quick)
