"""``python -m rog.experiment``: the same command as ``scripts/run.py`` (one run, a child mode, or the
plan); the launcher starts every child process this way (:data:`rog.experiment.config.RUN_MODULE`)."""

import sys

from rog.experiment.cli import main

if __name__ == "__main__":
    sys.exit(main())
