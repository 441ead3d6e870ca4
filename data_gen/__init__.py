"""Offline data generators for the toolkit (synthetic bandwidth traces: :mod:`data_gen.synth_traces`)."""
