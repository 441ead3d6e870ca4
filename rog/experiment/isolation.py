"""The isolation rule of docs/fleet.md: is TCP's slow-start restart after idle what the simulator misses?

Per cell (system, workers; per-worker links, no access point) the stall error ``e = |sim - emu| / emu`` (stall per
iteration, the validation's measure, :func:`rog.experiment.simulate_study.validation`).  ``e_off``: the cells run
with ``--tcp-slow-start-after-idle off`` (seed 3); ``e_on``: the validation's seeds 1 and 2 (slow start after idle
on, the kernel's default; seed 1 alone where seed 2's cell did not run: :data:`SEED1_NO_AP_STALL`, its table in
docs/fleet.md).  The verdict (:func:`isolation_verdict`), as the rule states it:

* "slow-start restart is the main cause": mean ``e_off`` <= 0.5 x mean ``e_on`` and ``e_off`` <= 0.5 x ``e_on``
  in at least two thirds of the cells;
* "a cause, not the main one": mean ``e_off`` above 0.5 and at most 0.8 x mean ``e_on``;
* otherwise "not shown to be a cause"; with fewer than 4 cells, no verdict.

``python -m rog.experiment.isolation SIM_DIR EMU_DIR [--control SIM_DIR EMU_DIR]`` prints the table and the
verdict (its JSON on the last line); ``--control`` adds, beside the verdict and outside it, the same cells of the
same seed with slow start after idle on.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

__all__ = ["CELLS", "SEED1_NO_AP_STALL", "stall_error", "cell_errors", "isolation_verdict", "main"]

CELLS = (("SSP-4", 4), ("FLOWN", 4), ("ROG-4", 4), ("SSP-4", 8), ("FLOWN", 8), ("ROG-4", 8))
# seed 1's stall per iteration (s), emulated and simulated, of the validation's no-AP cells (docs/fleet.md's table,
# 3 decimals); seed 2 did not run
SEED1_NO_AP_STALL = {("FLOWN", 4): (0.211, 0.216), ("ROG-4", 4): (0.095, 0.107), ("SSP-4", 4): (0.112, 0.094),
                     ("FLOWN", 8): (1.100, 1.040), ("ROG-4", 8): (0.212, 0.203), ("SSP-4", 8): (0.222, 0.174)}
MIN_CELLS = 4
MAIN_SHARE, CAUSE_SHARE, CELL_SHARE = 0.5, 0.8, 2.0 / 3.0
MAIN, CAUSE, NOT_SHOWN, NO_VERDICT = ("slow-start restart is the main cause", "a cause, not the main one",
                                      "not shown to be a cause", "no verdict")


def stall_error(emu_s: float, sim_s: float) -> float:
    """``|sim - emu| / emu`` (inf where the testbed measured no stall)."""
    return abs(sim_s - emu_s) / emu_s if emu_s > 0 else math.inf


def cell_errors(sim_dir: Path, emu_dir: Path) -> dict[tuple[str, int], dict]:
    """Per no-AP cell of :data:`CELLS` found in both folders: the emulated and simulated stall and time per
    iteration and the stall error (the validation's matching, :func:`rog.experiment.simulate_study.validation`)."""
    from .simulate_study import run_rows, validation

    out = {}
    for c in validation(run_rows(Path(sim_dir)), run_rows(Path(emu_dir)))["cells"]:
        key = (c["system"], c["workers"])
        if not c["ap"] and key in CELLS:
            out[key] = dict(emu_stall_s=c["emu_stall_s"], sim_stall_s=c["sim_stall_s"], emu_time_s=c["emu_time_s"],
                            sim_time_s=c["sim_time_s"], time_err=c["time_err"],
                            e=stall_error(c["emu_stall_s"], c["sim_stall_s"]))
    return out


def isolation_verdict(e_off: dict, e_on: dict) -> dict:
    """The rule's verdict over the cells both ``{cell: e}`` mappings hold (see the module doc)."""
    cells = [c for c in CELLS if c in e_off and c in e_on]
    out = dict(cells=[list(c) for c in cells], n=len(cells))
    if len(cells) < MIN_CELLS:
        return dict(out, verdict=NO_VERDICT, reason=f"{len(cells)} of {len(CELLS)} cells run; the rule needs {MIN_CELLS}")
    mean_off = statistics.mean(e_off[c] for c in cells)
    mean_on = statistics.mean(e_on[c] for c in cells)
    halved = [c for c in cells if e_off[c] <= MAIN_SHARE * e_on[c]]
    need = math.ceil(CELL_SHARE * len(cells) - 1e-9)
    if mean_off <= MAIN_SHARE * mean_on and len(halved) >= need:
        verdict = MAIN
    elif MAIN_SHARE * mean_on < mean_off <= CAUSE_SHARE * mean_on:
        verdict = CAUSE
    else:
        verdict = NOT_SHOWN
    return dict(out, verdict=verdict, mean_e_off=mean_off, mean_e_on=mean_on, share=mean_off / mean_on,
                cells_halved=len(halved), cells_needed=need)


def _markdown(off: dict, on: dict, v: dict, control: dict | None) -> str:
    from rog.analysis.tables import fmt, markdown_table

    header = ["workers", "system", "stall emu off (s)", "sim (s)", "e_off", "e_on (seed 1)", "e_off <= 0.5 e_on"]
    header += ["stall emu on, seed 3 (s)", "e_on (seed 3)"] if control is not None else []
    rows = []
    for cell in CELLS:
        o, c = off.get(cell) or {}, (control or {}).get(cell) or {}
        halved = "-" if not o else ("yes" if o["e"] <= MAIN_SHARE * on[cell] else "no")
        rows.append([cell[1], cell[0], fmt(o.get("emu_stall_s"), 3), fmt(o.get("sim_stall_s"), 3),
                     fmt(o.get("e"), 0, 100, unit=" %"), fmt(on.get(cell), 0, 100, unit=" %"), halved]
                    + ([fmt(c.get("emu_stall_s"), 3), fmt(c.get("e"), 0, 100, unit=" %")] if control is not None else []))
    why = (f" ({v['reason']})" if "reason" in v else
           f": mean e_off {100 * v['mean_e_off']:.0f} % against mean e_on {100 * v['mean_e_on']:.0f} % (share "
           f"{v['share']:.2f}); e_off <= 0.5 e_on in {v['cells_halved']} of {v['n']} cells (needs {v['cells_needed']})")
    return "\n".join(markdown_table(header, rows) + ["", f"Verdict: **{v['verdict']}**{why}."]) + "\n"


def main(argv=None) -> int:
    """``SIM_DIR EMU_DIR [--control SIM_DIR EMU_DIR]``: the table and the verdict, its JSON on the last line."""
    p = argparse.ArgumentParser(prog="python -m rog.experiment.isolation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sim_dir", type=Path, help="the simulated runs of the cells (slow start after idle off)")
    p.add_argument("emu_dir", type=Path, help="the emulated runs with --tcp-slow-start-after-idle off")
    p.add_argument("--control", nargs=2, type=Path, metavar=("SIM_DIR", "EMU_DIR"), default=None,
                   help="the same cells and seed with slow start after idle on (reported beside, not in the verdict)")
    a = p.parse_args(argv)
    off = cell_errors(a.sim_dir, a.emu_dir)
    on = {c: stall_error(*SEED1_NO_AP_STALL[c]) for c in CELLS}
    v = isolation_verdict({c: d["e"] for c, d in off.items()}, on)
    control = cell_errors(*a.control) if a.control else None
    print(_markdown(off, on, v, control))
    print(json.dumps(dict(v, e_off={f"{s} {w}": d for (s, w), d in off.items()},
                          e_on={f"{s} {w}": e for (s, w), e in on.items()},
                          control=None if control is None else {f"{s} {w}": d for (s, w), d in control.items()})))
    return 0 if off else 1


if __name__ == "__main__":
    sys.exit(main())
