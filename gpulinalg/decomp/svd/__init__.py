"""SVD: ``svd`` (cuSOLVER gesvd/gesvdj/gesvdp drivers)."""
