"""Fault injection: scenarios that attack the toolkit with hostile input, damaged bytes,
signals at random moments and runtime faults, each returning measured values.

Every scenario module exposes ``SCENARIOS`` (name -> callable taking a
:class:`~benchmarks.faults.registry.ScenarioContext`, returning a result dict); :mod:`benchmarks.faults.registry`
lists the modules and ``scripts/bench_faults.py`` runs them.
"""
