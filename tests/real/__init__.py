"""Real-checkpoint tier (pytest -m real): checkpoints built by python tools/build_real.py."""
