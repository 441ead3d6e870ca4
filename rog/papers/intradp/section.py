"""Intra-DP's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .summary import intradp_markdown, intradp_summary


def summary_section(runs: Sequence[Any], item_sets: dict | None, result_dir: Path) -> tuple[dict, str] | None:
    """The inference mode's Table 6 and Fig. 1 rows (``result/intradp/``), or None when it did not run."""
    idp = intradp_summary(result_dir)
    if not (idp["table6"] or idp["fig1"]):
        return None
    return idp, intradp_markdown(result_dir)
