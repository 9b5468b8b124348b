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
