"""ADSP's Figs. 3b and 3c from the Fig. 3a grid runs: the implicit momentum ``1 - p`` of Eq. (3) at each fixed
commit rate, and the time to the target against it.

Eq. (3): ``p = 1 / (1 + (1 - 1/m) * sum_i Gamma / (dC_i * v_i))``.  As printed, the summand is dimensionless only
with ``v_i`` in seconds per step; it is then ``tau_i``, worker ``i``'s local steps per commit, which each run
measures (``compute`` records over ``push`` records).  The implicit momentum falls as the commit rate rises
by the formula itself, so Fig. 3b is a figure of measured inputs, not a claim; Fig. 3c re-draws Fig. 3a's
times against it (the U there is Fig. 3a's verdict, docs/adsp.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rog.analysis.load import RunData
from rog.analysis.tables import markdown_table


def steps_per_commit(run: RunData) -> list[float]:
    """Per worker (rank order): its ``compute`` records over its ``push`` records (None-free; workers without a
    commit are left out)."""
    out = []
    for rank in sorted(k for k in run.events if k.startswith("w")):
        ev = run.events[rank]
        if ev is None or ev.empty or "kind" not in ev.columns:
            continue
        steps, commits = int((ev["kind"] == "compute").sum()), int((ev["kind"] == "push").sum())
        if commits:
            out.append(steps / commits)
    return out


def implicit_momentum(taus: Sequence[float], m: int | None = None) -> float | None:
    """``1 - p`` of Eq. (3) for local steps per commit ``taus`` (``m``: the workers, default ``len(taus)``)."""
    m = len(taus) if m is None else int(m)
    if not taus or m < 1:
        return None
    return 1.0 - 1.0 / (1.0 + (1.0 - 1.0 / m) * float(sum(taus)))


def fig3bc_rows(ushape: dict[str, Any], runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """Per seed and fixed rate ``k`` of :func:`rog.papers.adsp.summary.ushape_rows`' grids: the measured steps
    per commit, the implicit momentum and the time to the seed's target."""
    by_id = {r.run_id: r for r in runs}
    out = []
    for g in ushape.get("by_seed") or []:
        for x in g["rows"]:
            run = by_id.get(x["run_id"])
            taus = steps_per_commit(run) if run is not None else []
            m = run.workers if run is not None else None
            out.append(dict(seed=g["seed"], k=x["k"], steps_per_commit=taus, implicit_momentum=implicit_momentum(taus, m),
                            time_to_target_s=x["time_to_target_s"], best=x["k"] == g["best_k"]))
    return out


def fig3bc_markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Lines of summary.md for Figs. 3b and 3c."""
    if not rows:
        return []
    out = ["### Figs. 3b and 3c: the implicit momentum of each fixed commit rate", "",
           *markdown_table(["seed", "commits per check period", "local steps per commit (per worker)",
                            "implicit momentum 1 - p", "time to target"])]
    for x in rows:
        taus = ", ".join(f"{t:.1f}" for t in x["steps_per_commit"]) or "n/a"
        mu = "n/a" if x["implicit_momentum"] is None else f"{x['implicit_momentum']:.3f}"
        t = "n/a" if x["time_to_target_s"] is None else f"{x['time_to_target_s']:.1f} s" + (" (fastest)" if x["best"] else "")
        out.append(f"| {x['seed']} | {x['k']} | {taus} | {mu} | {t} |")
    out += ["", "Eq. (3) with v_i read as seconds per step, so each summand is the measured local steps per commit. "
            "The momentum falls with the commit rate by the formula itself (a figure, not a claim); Fig. 3c is "
            "Fig. 3a's times against it, so its U is Fig. 3a's verdict.", ""]
    return out


def plot_fig3bc(rows: Sequence[dict[str, Any]], figure_dir: str | Path, formats=("pdf", "png")) -> list[Path]:
    """``adsp_fig3bc``: (b) the implicit momentum against the commit rate, (c) the time to target against it."""
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rog.analysis.figure_files import save_figure

    fig, (ax_b, ax_c) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    for seed in sorted({x["seed"] for x in rows}):
        pts = [x for x in rows if x["seed"] == seed and x["implicit_momentum"] is not None]
        ax_b.plot([x["k"] for x in pts], [x["implicit_momentum"] for x in pts], "o-", label=f"seed {seed}")
        timed = sorted((x for x in pts if x["time_to_target_s"] is not None), key=lambda x: x["implicit_momentum"])
        ax_c.plot([x["implicit_momentum"] for x in timed], [x["time_to_target_s"] for x in timed], "o-",
                  label=f"seed {seed}")
    ax_b.set_xscale("log", base=2)
    ax_b.set_xlabel("commits per check period")
    ax_b.set_ylabel("implicit momentum 1 - p")
    ax_b.set_title("Fig. 3b (Eq. 3, measured steps per commit)", fontsize=9)
    ax_c.set_xlabel("implicit momentum 1 - p")
    ax_c.set_ylabel("time to the seed's target (s)")
    ax_c.set_title("Fig. 3c (Fig. 3a's times)", fontsize=9)
    ax_b.legend(fontsize=7)
    fig.subplots_adjust(wspace=0.4)
    return save_figure(fig, Path(figure_dir), "adsp_fig3bc", formats)
