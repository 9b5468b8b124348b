"""check_finite reads a large host array in blocks: its mask stays small whatever the input (a
broadcast view 'of' a huge matrix must not allocate a mask of the full size)."""

import tracemalloc

import numpy as np
import pytest

from gpulinalg._runtime.validation import check_finite


def test_large_view_is_checked_with_a_small_mask():
    view = np.broadcast_to(np.float64(1.0), (8000, 20000))  # a 160 MB mask if made at once
    tracemalloc.start()
    try:
        check_finite(view, "a")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@pytest.mark.parametrize("where", [(0, 0), (4999, 4999), (2500, 17)])
def test_blocks_still_find_a_nan(where):
    b = np.ones((5000, 5000))
    b[where] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        check_finite(b, "b")


def test_broadcast_view_of_tens_of_gib_is_read_once():
    """A 200000^2 view of one row (298 GiB if made) reads the row alone: no input-sized
    temporary and no pass over 4e10 entries (about 13 s in blocks)."""
    import time
    row = np.ones(200_000)
    view = np.broadcast_to(row, (200_000, 200_000))
    tracemalloc.start()
    start = time.perf_counter()
    try:
        check_finite(view, "a")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20 and time.perf_counter() - start < 1.0
    row[123] = np.inf
    with pytest.raises(ValueError, match="infs or NaNs"):
        check_finite(np.broadcast_to(row[:, None], (200_000, 200_000)), "a")


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_partly_broadcast_views_still_find_a_nan(lib):
    base = np.ones((3, 1, 4))
    base[2, 0, 1] = np.nan
    if lib == "torch":
        torch = pytest.importorskip("torch")
        view = torch.from_numpy(base).expand(3, 5, 4)
    else:
        view = np.broadcast_to(base, (3, 5, 4))
    with pytest.raises(ValueError, match="infs or NaNs"):
        check_finite(view, "a")
