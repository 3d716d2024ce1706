"""Benchmarks of inference4py against its peers (see benchmarks/README.md)."""
