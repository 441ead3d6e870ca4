"""The ``simulate`` item (opt-in): the fleet study of docs/fleet.md, and the simulator's validation table.

``bash scripts/run_all.sh simulate`` (or ``python -m rog.experiment.simulate_study``) runs
``scripts/simulate.py`` for 4-64 workers x BSP, SSP-4, FLOWN-4, ROG-4 on each recorded outdoor trace
(``tests/data/recorded_traces/``), without and with a shared access point sized as an 802.11ac AP
(:data:`AP_80211AC_MBIT`), then writes ``R/simulate/summary.md`` and ``F/fleet.png``.  Simulated runs
already done are skipped (``scripts/simulate.py`` skips a run folder holding ``DONE``).

``python -m rog.experiment.simulate_study --validate SIM_DIR EMU_DIR`` prints the validation table of
docs/fleet.md's rule (the simulated runs against the emulated testbed's, matched by system, workers and
access point) as markdown, and its JSON on the last line; ``--validate-median SIM_DIR EMU_DIR [...]`` (a pair per
seed) the same on each side's per-cell medians over the seeds (:func:`median_rows`).

Throughput is the team's iterations per second (every worker's iterations / the run's span); a system's
throughput "stops improving" at the first worker count of the sweep from which the next count gains less
than :data:`KNEE_GAIN` (10 %).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from rog.analysis.figure_files import MODULE_FORMATS, save_figure
from rog.analysis.tables import fmt, markdown_table
from rog.experiment.module_item import ItemError, ModuleItem, Summary, item_main, python_step
from rog.paths import repo_root

__all__ = ["NAME", "ESTIMATE_S", "AP_80211AC_MBIT", "steps", "run_rows", "validation", "median_rows", "knee",
           "fleet_figure", "main"]

NAME = "simulate"
ROOT = repo_root()
TRACES = ("outdoors-w1.csv", "outdoors-w2.csv")
WORKERS = "4,8,16,32,64"
SYSTEMS = "BSP,SSP-4,FLOWN-4,ROG-4"
ITERATIONS = 20
# A 2x2 802.11ac (Wave 1) AP at 80 MHz: VHT-MCS 9, 2 spatial streams, short guard interval = 866.7 Mbit/s PHY
# (IEEE Std 802.11ac-2013, the VHT-MCS rate tables); goodput taken as 0.6 of PHY (an assumption: MAC, ACK and
# TCP/IP overhead) = 520 Mbit/s; x 0.7 into the recorded traces' units (their rates are the record x 0.7).
AP_PHY_MBIT = 866.7
AP_GOODPUT_SHARE = 0.6
TRACE_UNITS = 0.7
AP_80211AC_MBIT = round(AP_PHY_MBIT * AP_GOODPUT_SHARE * TRACE_UNITS, 1)  # 364.0 trace Mbit/s
KNEE_GAIN = 0.10
LABELS = ("BSP", "SSP-4", "FLOWN", "ROG-4")  # the systems as the analysis labels them (FLOWN's threshold is not named)
# measured here (2 cores, load average 4-11, niced): 64 workers x 4 systems x 30 iterations 292 s wall, 153 s CPU;
# at the item's 20 iterations about SIXTY4_S, and the sweep 4..64 about twice that
SIXTY4_S = 200.0
ESTIMATE_S = 2 * len(TRACES) * 2 * SIXTY4_S
# run_all.sh --seeds: refused (rog.experiment.items.module_item_seeds), with this reason
SEEDS_REFUSED = "the simulator replays the recorded traces deterministically; its replicas are the traces"
TOLERANCE = {"time_rel": 0.15, "stall_rel": 0.15, "stall_floor_of_time": 0.05, "ratio_abs": 0.05}


def steps(result_dir: Path) -> list[tuple[Path, list[str]]]:
    """``(output folder, argv)`` per trace x access point (``python -m rog.experiment.simulate``, what
    ``scripts/simulate.py`` runs, from the repository root)."""
    out = []
    for trace in TRACES:
        for ap in (None, AP_80211AC_MBIT):
            folder = Path(result_dir) / NAME / f"{Path(trace).stem}-{'noap' if ap is None else 'ap'}"
            args = ["-m", "rog.experiment.simulate", "--trace", str(ROOT / "tests" / "data" / "recorded_traces" / trace),
                    "--workers", WORKERS, "--systems", SYSTEMS, "--iterations", str(ITERATIONS),
                    "--result-dir", str(folder)]
            out.append((folder, args + (["--ap-mbit", f"{ap:g}"] if ap is not None else [])))
    return out


def run_rows(result_dir: Path) -> list[dict]:
    """One row per run folder under ``result_dir``: label, workers, testbed, access point, time and stall per
    iteration, team throughput, bytes moved and the AP's utilisation (simulated runs)."""
    from rog.analysis.load import load_runs

    rows = []
    for run in load_runs(result_dir):
        it = run.iterations
        if it.empty:
            continue
        span = float(it["t_end_s"].max() - it["t_start_s"].min())
        sim = run.config.get("simulation") or {}
        ap = (sim.get("shared_ap") or {}) if run.config.get("testbed") == "simulated" else None
        has_ap = bool(ap) if ap is not None else run.config.get("cap_mbit") is not None
        bytes_moved = float((it["push_bytes"].fillna(0) + it["pull_bytes"].fillna(0)).sum())
        rows.append(dict(run=run.run_id, system=run.label, workers=run.workers, testbed=run.config.get("testbed"),
                         ap=has_ap, time_s=float(it["span_s"].mean()), stall_s=float(it["stall_s"].mean()),
                         compute_s=float(it["compute_s"].mean()), throughput=len(it) / span if span > 0 else math.nan,
                         span_s=span, bytes_moved=bytes_moved, factor=sim.get("payload_rate_factor"),
                         ap_utilisation=(ap or {}).get("utilisation")))
    return rows


def _ratio(rows: list[dict], num: str, den: str, key: str) -> float:
    a = [r[key] for r in rows if r["system"] == num]
    b = [r[key] for r in rows if r["system"] == den]
    return a[0] / b[0] if a and b and b[0] > 0 else math.nan


def validation(sim_rows: list[dict], emu_rows: list[dict]) -> dict:
    """docs/fleet.md's rule over matching cells (system, workers, access point): per-cell and ratio verdicts."""
    tol = TOLERANCE
    cells, ratios = [], []
    emu = {(r["system"], r["workers"], r["ap"]): r for r in emu_rows}
    for s in sorted(sim_rows, key=lambda r: (r["ap"], r["workers"], r["system"])):
        e = emu.get((s["system"], s["workers"], s["ap"]))
        if e is None:
            continue
        t_err = (s["time_s"] - e["time_s"]) / e["time_s"]
        st_err = (s["stall_s"] - e["stall_s"]) / e["stall_s"] if e["stall_s"] > 0 else math.inf
        small = e["stall_s"] < tol["stall_floor_of_time"] * e["time_s"]
        stall_pass = abs(st_err) <= tol["stall_rel"] or (
            small and abs(s["stall_s"] - e["stall_s"]) <= tol["stall_floor_of_time"] * e["time_s"])
        cells.append(dict(system=s["system"], workers=s["workers"], ap=s["ap"], sim_time_s=s["time_s"],
                          emu_time_s=e["time_s"], time_err=t_err, time_pass=abs(t_err) <= tol["time_rel"],
                          sim_stall_s=s["stall_s"], emu_stall_s=e["stall_s"], stall_err=st_err,
                          stall_pass_strict=abs(st_err) <= tol["stall_rel"], stall_pass=stall_pass,
                          emu_compute_s=e["compute_s"], sim_compute_s=s["compute_s"]))
    for w, ap in sorted({(c["workers"], c["ap"]) for c in cells}):
        srows = [r for r in sim_rows if r["workers"] == w and r["ap"] == ap]
        erows = [r for r in emu_rows if r["workers"] == w and r["ap"] == ap]
        for den in ("BSP", "SSP-4"):
            rs, re_ = _ratio(srows, "ROG-4", den, "time_s"), _ratio(erows, "ROG-4", den, "time_s")
            ratios.append(dict(workers=w, ap=ap, ratio=f"ROG-4/{den}", sim=rs, emu=re_, diff=rs - re_,
                               passed=abs(rs - re_) <= tol["ratio_abs"]))
    ok = bool(cells) and all(c["time_pass"] and c["stall_pass"] for c in cells) and all(r["passed"] for r in ratios)
    return dict(rule=TOLERANCE, cells=cells, ratios=ratios, verdict="pass" if ok else "fail")


def median_rows(per_seed: list[list[dict]]) -> list[dict]:
    """docs/fleet.md's seed rule: per cell (system, workers, access point) the median over the seeds that have it of
    time, stall and compute per iteration (``per_seed``: one list of :func:`run_rows`-like rows per seed); each row
    says its ``seeds`` (how many)."""
    cells: dict = {}
    for rows in per_seed:
        for r in rows:
            cells.setdefault((r["system"], r["workers"], r["ap"]), []).append(r)
    return [dict(system=k[0], workers=k[1], ap=k[2], seeds=len(rs),
                 **{f: statistics.median(r[f] for r in rs) for f in ("time_s", "stall_s", "compute_s")})
            for k, rs in cells.items()]


def validation_markdown(v: dict) -> str:
    """The validation table as markdown."""
    pc = lambda x: fmt(x, 0, 100.0, sign=True, unit=" %")  # noqa: E731
    yn = lambda b: "pass" if b else "MISS"  # noqa: E731
    ap = lambda c: "yes" if c["ap"] else "no"  # noqa: E731
    lines = markdown_table(
        ("workers", "AP", "system", "time/iter emu", "sim", "err", "stall/iter emu", "sim", "err", "compute emu", "sim"),
        [(c["workers"], ap(c), c["system"], fmt(c["emu_time_s"], 3), fmt(c["sim_time_s"], 3),
          f"{pc(c['time_err'])} {yn(c['time_pass'])}", fmt(c["emu_stall_s"], 3), fmt(c["sim_stall_s"], 3),
          f"{pc(c['stall_err'])} {yn(c['stall_pass'])}", fmt(c["emu_compute_s"], 3), fmt(c["sim_compute_s"], 3))
         for c in v["cells"]])
    lines += [""] + markdown_table(
        ("workers", "AP", "ratio (time/iter)", "emu", "sim", "sim - emu"),
        [(r["workers"], ap(r), r["ratio"], fmt(r["emu"], 3), fmt(r["sim"], 3),
          f"{fmt(r['diff'], 3, sign=True)} {yn(r['passed'])}") for r in v["ratios"]])
    lines += ["", f"Verdict: **{v['verdict']}**."]
    return "\n".join(lines) + "\n"


def knee(points: list[tuple[int, float]]) -> int | None:
    """The first worker count from which the next one gains less than KNEE_GAIN throughput (None: never)."""
    pts = sorted(points)
    for (w0, t0), (_, t1) in zip(pts, pts[1:]):
        if not t1 > (1 + KNEE_GAIN) * t0:
            return w0
    return None


def fleet_rows(result_dir: Path) -> list[dict]:
    """Every simulated run of the study under ``result_dir/simulate/<trace>-<ap>/``, tagged with its trace."""
    out = []
    for folder, _ in steps(result_dir):
        if folder.is_dir():
            for r in run_rows(folder):
                r["trace"] = folder.name.rsplit("-", 1)[0]
                f = r.get("factor")
                if r["ap_utilisation"] is None and f:  # no AP: the load the fleet offers a 802.11ac AP
                    r["ap_load"] = r["bytes_moved"] * 8 / 1e6 / (AP_80211AC_MBIT * f * r["span_s"])
                else:
                    r["ap_load"] = r["ap_utilisation"]
                out.append(r)
    return out


def fleet_figure(rows: list[dict], figure_dir: Path) -> Path:
    """Ratios (ROG-4 over BSP and SSP-4, time and stall per iteration), team throughput and the AP's load
    against workers, without (solid) and with (dashed) the shared 802.11ac AP; the traces averaged: ``fleet.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = _by_cell(rows)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for ap, ls in ((False, "-"), (True, "--")):
        tag = "shared AP" if ap else "own links only"
        ws = sorted({w for (s, w, a) in agg if a == ap})
        for den, color in (("BSP", "tab:red"), ("SSP-4", "tab:blue")):
            for key, marker in (("time_s", "o"), ("stall_s", "s")):
                ys = [_safe_div(agg.get(("ROG-4", w, ap), {}).get(key), agg.get((den, w, ap), {}).get(key)) for w in ws]
                ax[0].plot(ws, ys, ls=ls, marker=marker, color=color,
                           label=f"ROG-4/{den} {'time' if key == 'time_s' else 'stall'} ({tag})")
        for system, color in zip(LABELS, ("tab:red", "tab:blue", "tab:green", "k")):
            ax[1].plot(ws, [agg.get((system, w, ap), {}).get("throughput", math.nan) for w in ws], ls=ls,
                       marker="o", color=color, label=f"{system} ({tag})")
            ax[2].plot(ws, [agg.get((system, w, ap), {}).get("ap_load", math.nan) for w in ws], ls=ls,
                       marker="o", color=color, label=f"{system} ({tag})")
    ax[0].set(xscale="log", xlabel="workers", ylabel="ratio (per iteration)", title="ROG-4 over BSP and SSP-4")
    ax[1].set(xscale="log", yscale="log", xlabel="workers", ylabel="team iterations / s", title="throughput")
    ax[2].set(xscale="log", xlabel="workers", ylabel="AP bytes / AP capacity",
              title=f"PS link (802.11ac AP, {AP_80211AC_MBIT:g} trace Mbit/s)")
    ax[2].axhline(1.0, color="grey", lw=0.8)
    from matplotlib.ticker import NullFormatter, NullLocator, ScalarFormatter

    for a in ax:
        a.xaxis.set_minor_locator(NullLocator())
        a.set_xticks([4, 8, 16, 32, 64], ["4", "8", "16", "32", "64"])
        a.grid(alpha=0.3)
    ax[1].yaxis.set_major_formatter(ScalarFormatter())
    ax[1].yaxis.set_minor_formatter(NullFormatter())
    ax[0].legend(fontsize=6)
    ax[1].legend(fontsize=6)
    fig.suptitle("Simulated fleet (testbed: simulated; time composition only), recorded outdoor traces, mean of "
                 f"{len({r['trace'] for r in rows})} traces", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, figure_dir, "fleet", MODULE_FORMATS)[0]


def _safe_div(a, b) -> float:
    return a / b if a is not None and b else math.nan


def _by_cell(rows: list[dict]) -> dict:
    """(system, workers, ap) -> the traces' mean of every numeric field."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["system"], r["workers"], r["ap"]), []).append(r)
    out = {}
    for k, rs in cells.items():
        out[k] = {f: sum(r[f] for r in rs) / len(rs) for f in ("time_s", "stall_s", "throughput", "ap_load")
                  if all(r.get(f) is not None for r in rs)}
    return out


def study_markdown(rows: list[dict]) -> str:
    """The fleet study's tables: per cell time, stall, throughput, AP load; ratios; each system's knee."""
    agg = _by_cell(rows)
    lines = ["# Fleet study (simulated; time composition only, no accuracy claims)", "",
             f"Traces: {', '.join(sorted({r['trace'] for r in rows}))} (means over them). Shared AP: "
             f"{AP_80211AC_MBIT:g} Mbit/s in trace units (802.11ac 2x2 80 MHz: {AP_PHY_MBIT} Mbit/s PHY x "
             f"{AP_GOODPUT_SHARE} goodput x {TRACE_UNITS} trace scale).", ""]
    yes = lambda ap: "yes" if ap else "no"  # noqa: E731
    lines += markdown_table(
        ("AP", "workers", "system", "time/iter s", "stall/iter s", "team it/s", "AP load"),
        [(yes(ap), w, system, fmt(c["time_s"], 3), fmt(c["stall_s"], 3), fmt(c["throughput"]), fmt(c.get("ap_load")))
         for (system, w, ap), c in sorted(agg.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0]))])
    def ratio(w, ap, den, f):
        return _safe_div(agg.get(("ROG-4", w, ap), {}).get(f), agg.get((den, w, ap), {}).get(f))

    lines += [""] + markdown_table(
        ("AP", "workers", "ROG-4/BSP time", "ROG-4/BSP stall", "ROG-4/SSP-4 time", "ROG-4/SSP-4 stall"),
        [(yes(ap), w, *(fmt(ratio(w, ap, d, f)) for d in ("BSP", "SSP-4") for f in ("time_s", "stall_s")))
         for ap in (False, True) for w in sorted({k[1] for k in agg if k[2] == ap})])
    lines += ["", f"Throughput stops improving (next worker count gains < {KNEE_GAIN:.0%}):", ""]
    for ap in (False, True):
        for system in LABELS:
            pts = [(w, c["throughput"]) for (s, w, a), c in agg.items() if s == system and a == ap]
            k = knee(pts)
            lines.append(f"- {system}, {'shared AP' if ap else 'own links'}: "
                         + (f"{k} workers" if k is not None else "still improving at the largest count"))
    return "\n".join(lines) + "\n"


def _arguments(ap) -> None:
    ap.add_argument("--validate", nargs=2, metavar=("SIM_DIR", "EMU_DIR"), default=None,
                    help="print docs/fleet.md's validation table of these run folders and exit")
    ap.add_argument("--validate-median", nargs="+", metavar="DIR", default=None,
                    help="SIM_DIR EMU_DIR [SIM_DIR EMU_DIR ...], one pair per seed: the table on the per-cell medians")


def _validate(a, ap) -> int | None:
    """``--validate`` / ``--validate-median``: print the validation table and its JSON, run no step."""
    if a.validate_median:
        dirs = [Path(d) for d in a.validate_median]
        if len(dirs) % 2:
            ap.error("--validate-median takes SIM_DIR EMU_DIR pairs, one per seed")
        v = validation(median_rows([run_rows(d) for d in dirs[0::2]]), median_rows([run_rows(d) for d in dirs[1::2]]))
    elif a.validate:
        v = validation(run_rows(Path(a.validate[0])), run_rows(Path(a.validate[1])))
    else:
        return None
    print(validation_markdown(v))
    print(json.dumps(v))
    return 0 if v["cells"] else 1


def _summarise(a, rc: int) -> Summary:
    result_dir = Path(a.result_dir)
    rows = fleet_rows(result_dir)
    if not rows:
        raise ItemError("no simulated run to summarise")
    fig = fleet_figure(rows, Path(a.figure_dir))
    return Summary(study_markdown(rows), figures=[fig],
                   last_line=dict(summary=str(result_dir / NAME / "summary.md"), figure=str(fig), runs=len(rows)))


ITEM = ModuleItem(tag=NAME, folder=NAME, prog="python -m rog.experiment.simulate_study", doc=__doc__,
                  steps=lambda a: (python_step(args, False) for _, args in steps(Path(a.result_dir))),
                  summarise=_summarise, arguments=_arguments, check=_validate, estimate_s=lambda a: ESTIMATE_S)


def main(argv=None) -> int:
    """The item (steps, summary, figure), or ``--validate SIM_DIR EMU_DIR``."""
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
