"""Fixtures shared by gp's tests."""

import pytest

from gpulinalg._runtime import budget_host


@pytest.fixture
def host_bytes(monkeypatch):
    """``host_bytes(b)``: the host budget sees ``b`` bytes available (every check reads anew)."""
    def set_available(nbytes):
        monkeypatch.setattr(budget_host, "_read", lambda: int(nbytes))
        monkeypatch.setattr(budget_host, "_reading", (-1e9, None))
        monkeypatch.setattr(budget_host, "HOST_CACHE_S", -1.0)
    return set_available
