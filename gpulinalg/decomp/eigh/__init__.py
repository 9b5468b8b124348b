"""Symmetric/Hermitian eigenproblems: ``eigh`` and ``eigvalsh`` (cuSOLVER syevd, syevdx, sygvd,
syevj batched)."""
