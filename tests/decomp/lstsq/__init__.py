"""Tests of gpulinalg.decomp.lstsq and pinv."""
