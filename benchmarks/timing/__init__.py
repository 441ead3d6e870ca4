"""Wall-clock accuracy benchmarks: paced compute, stream takes, shaped links and timed evaluations measured
against real time (``python -m benchmarks.timing``).  The default test tier checks the same mechanisms on
fake clocks or with one-sided bounds; these figures, and the ``bench``-marked tests that assert them
(``bash scripts/test.sh -m bench``), want a quiet machine."""
