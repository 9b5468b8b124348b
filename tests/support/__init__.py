"""Test support: emulated GPU libraries, reference implementations, fixtures' helpers."""
