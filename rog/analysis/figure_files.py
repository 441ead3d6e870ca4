"""Writing a matplotlib figure once per format asked: one way for the bench's figures and every paper's
(rog/papers/<paper>/)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 150


def save_figure(fig, figure_dir: str | Path, name: str, formats: Iterable[str], dpi: int = DPI) -> list[Path]:
    """Write ``fig`` as ``<figure_dir>/<name>.<ext>`` for each of ``formats``, close it, return the paths."""
    figure_dir = Path(figure_dir)
    figure_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in formats:
        p = figure_dir / f"{name}.{ext}"
        fig.savefig(p, dpi=dpi, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out
