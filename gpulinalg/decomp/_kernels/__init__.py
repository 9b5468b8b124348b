"""The hand-written CUDA kernels (``*.cu`` sources shipped as package data) and their thin Python
launchers; every one has a library route beside it."""
