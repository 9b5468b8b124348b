"""Least squares and the pseudo-inverse: ``lstsq`` and ``pinv``."""
