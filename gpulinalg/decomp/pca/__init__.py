"""``PCA``: scikit-learn's estimator on decomp's low-rank engines."""
