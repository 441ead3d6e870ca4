"""Where the repository is: the one place that knows the package sits at ``<repository>/rog/``.

Code that needs files beside the package (``configs/``, ``scripts/``, the code shipped to hosts, the
git version in a run's manifest) asks :func:`repo_root` instead of counting ``parents`` itself.
"""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def repo_root() -> Path:
    """The repository folder (the one holding ``rog/``, ``configs/`` and ``scripts/``), absolute."""
    return _ROOT
