"""Benchmark and test harnesses that are not part of the installable ``rog`` package."""
