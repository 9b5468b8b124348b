"""Triangular solves: ``solve_triangular`` (cuBLAS trsm and the hand-written streamed solves)."""
