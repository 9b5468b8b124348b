"""Tests of gpulinalg.decomp.eigh and eigvalsh."""
