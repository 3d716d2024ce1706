"""Builders of the real-checkpoint test tier (``python tools/build_real.py``; tests in tests/real)."""
