"""Benchmarks and fault harnesses over ``rog`` (installed beside it in the venv): the logic of ``scripts/bench_*.py``."""
