"""Writing a matplotlib figure: the one way every figure is saved (the bench's and every paper's,
rog/papers/<paper>/), once per format asked, at one dpi; the formats a ``--formats`` flag chose."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["DPI", "FORMATS", "MODULE_FORMATS", "KNOWN_FORMATS", "set_formats", "formats", "save_figure"]

DPI = 150  # every figure file's resolution (raster formats)
FORMATS = ("pdf", "png")  # what save_figure writes unless told; set_formats() changes it (e.g. PNG only)
MODULE_FORMATS = ("png",)  # the module items' figures (ScaDLES, Intra-DP, DynaComm), as they were always named
KNOWN_FORMATS = ("pdf", "png", "svg")
_formats = list(FORMATS)


def set_formats(formats: Sequence[str]) -> None:
    """Which files every figure is saved as from now on (a non-empty subset of ``pdf``, ``png``, ``svg``)."""
    bad = [f for f in formats if f not in KNOWN_FORMATS]
    if not formats or bad:
        raise ValueError(f"formats must be a non-empty subset of pdf, png, svg; got {list(formats)!r}")
    _formats[:] = list(formats)


def formats() -> tuple[str, ...]:
    """The formats :func:`save_figure` writes when not given any."""
    return tuple(_formats)


def save_figure(fig, figure_dir: str | Path, name: str, formats: Iterable[str] | None = None,
                dpi: int = DPI) -> list[Path]:
    """Write ``fig`` as ``<figure_dir>/<name>.<ext>`` for each of ``formats`` (None: those :func:`set_formats`
    chose), close it, return the paths.  Needs no matplotlib import of its own: ``fig`` brings its backend."""
    import matplotlib.pyplot as plt

    figure_dir = Path(figure_dir)
    figure_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in (_formats if formats is None else formats):
        p = figure_dir / f"{name}.{ext}"
        fig.savefig(p, dpi=dpi, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out
