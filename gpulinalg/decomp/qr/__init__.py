"""QR: ``qr`` (cuSOLVER geqrf/orgqr, CholeskyQR2 for tall matrices, TSQR on Dask)."""
