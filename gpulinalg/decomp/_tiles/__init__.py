"""Dask tile tasks shared by decomp's Dask engines, and the helpers that build their lazy graphs."""
