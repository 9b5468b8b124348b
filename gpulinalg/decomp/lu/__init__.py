"""LU: ``lu_factor``, ``lu_solve``, ``lu``, the general ``solve``, ``det``, ``slogdet`` and ``inv``
(cuSOLVER getrf/getrs)."""
