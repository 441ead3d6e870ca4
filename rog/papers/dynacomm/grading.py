"""DynaComm's claims as graded rows (:mod:`rog.analysis.grades`), with the ``L x delay`` null of :mod:`.nulls`.

:func:`graded_rows` reads the item's rounds (:func:`rog.papers.dynacomm.summary.dynacomm_summary`) and the sweep
(:func:`rog.papers.dynacomm.sweep.load_sweep`) of one result folder; :func:`documented_rows` gives the same rows
from the numbers docs/dynacomm.md reports for the last runs.  How mini models are graded (docs/dynacomm.md): a
claim about a paper's model is graded on the stand-in of its depth (ResNet-152: the 155-layer
``resnet152_mini``), as ``consistent at reduced scale`` at the unscaled 10 ms; at the delay scaled with the
stand-in's compute (:mod:`.scaling`, the ``dynacomm-scaled`` item's settings: :func:`setting_rows`) a row carries the
scaling argument, and may be ``reproduced``, where the plans' measured per-transfer cost reached it; ``built in``
where the ``L x delay`` term alone gives the verdict.
"""

from __future__ import annotations

import json
from typing import Any

from rog.analysis.grades import AGREES, DOES_NOT, NOT_DECIDABLE, GradedRow, NullResult, outcome_of

from .nulls import MODEL_LAYERS, check_holds, forward_lead_pp, iteration_lead
from .scaling import JETSON_COMM_S, JETSON_COMPUTE_S, SETTINGS, scaled_delay_ms, scaling_argument
from .summary import PAPER, dynacomm_summary

__all__ = ["PAPER_NAME", "DOCS", "claim_rows", "sweep_rows", "graded_rows", "setting_rows", "scaled_markdown",
           "documented_rows"]

DOCS = "docs/dynacomm.md"  # where the documented rows come from
PAPER_NAME = "DynaComm"
TO_RUN: tuple = ()  # the dynacomm-scaled item (rules 1-4) ran on 7 Dec 2026 (docs/dynacomm.md)
AGREE_PP, LBL_WORSE_PP, CLOSE_PP = 10.0, 15.0, 3.0  # the rules of rog.papers.dynacomm.summary
DEEP_LEAD, DEPTH_SLACK, DT_RISE, MARGIN = 0.10, 0.02, 0.02, 1.03  # the sweep's rules (rog.papers.dynacomm.sweep)


def _scaled(model: str, delay_ms: float, ratio: float = 1.0, delay_scaled: bool = False) -> str:
    layers = f" ({MODEL_LAYERS[model]} layers)" if model in MODEL_LAYERS else ""
    link = ("communication equals its compute (a ratio taken from the paper's own 41 %)" if ratio == 1.0 else
            f"communication is {ratio:.2f} x its compute (the Jetson-class ratio: the ROG artifact's BSP logs, "
            f"{JETSON_COMM_S:g} s / {JETSON_COMPUTE_S:g} s)")
    delay = (f"{delay_ms:.3f} ms per transfer scaled with the per-layer compute (10 ms x c_ours / c_paper)" if delay_scaled
             else f"{delay_ms:g} ms per transfer unscaled")
    return (f"{model}{layers}, 2 workers, link calibrated so Sequential's {link}, {delay} "
            "(paper: full-size models, about 10 ms edge-cloud round trip)")


def _null(name: str, value: str, ok: bool) -> NullResult:
    return NullResult(name, value, AGREES if ok else DOES_NOT)


def claim_rows(model: str, paper_model: str, paper: dict, rows: dict, delay_ms: float, seeds: str, ratio: float = 1.0,
               delay_scaled: bool = False, argument: str = "", counted: bool = True,
               reading: str = "") -> list[GradedRow]:
    """The item's claims on ``model``: the iteration reduction, LBL's forward far behind (ResNet-152), the
    layer-wise methods close (VGG-19); ``rows``: schedule -> {"it_red", "fwd_red", "fwd_s", "iteration_s"}.  A row
    names its ratio and delay; ``argument`` (a scaled delay reached, :func:`rog.papers.dynacomm.scaling.
    scaling_argument`) lets it be graded ``reproduced``; ``counted=False`` sets it beside, under ``reading``."""
    out = _claim_rows(model, paper_model, paper, rows, delay_ms, seeds, _scaled(model, delay_ms, ratio, delay_scaled))
    if not (argument or reading or not counted or delay_scaled or ratio != 1.0):
        return out
    tag = f" (ratio {ratio:.2f}, {delay_ms:.3f} ms)"
    return [GradedRow(**{**r.__dict__, "claim": r.claim + tag, "scaling_argument": argument, "counted": counted,
                         "reading": reading}) for r in out]


def _claim_rows(model: str, paper_model: str, paper: dict, rows: dict, delay_ms: float, seeds: str,
                scaled: str) -> list[GradedRow]:
    d, seq, L, dly = rows.get("dynacomm"), rows.get("sequential"), MODEL_LAYERS.get(model), delay_ms / 1000.0
    out = []
    it_ok = None if d is None else abs(d["it_red"] - paper["iteration"]) <= AGREE_PP
    out.append(GradedRow(PAPER_NAME, f"{paper_model}: iteration time -{paper['iteration']:.2f} % vs Sequential",
                         f"-{paper['iteration']:.2f} %", "n/a" if d is None else f"{-d['it_red']:+.1f} %", outcome_of(it_ok),
                         scaled, seeds=seeds, nulls=(_null("no overlap gain (DynaComm = Sequential)", "0.0 %",
                                                           abs(0.0 - paper["iteration"]) <= AGREE_PP),)))
    if "lbl" in paper.get("fwd", {}) and paper_model.startswith("ResNet"):
        lbl = rows.get("lbl")
        gap = None if d is None or lbl is None else d["fwd_red"] - lbl["fwd_red"]
        nulls = () if seq is None or L is None or "fwd_s" not in seq else (
            _null("the L x delay term alone", f"lead {forward_lead_pp(L, dly, seq['fwd_s']):.1f} pp",
                  forward_lead_pp(L, dly, seq["fwd_s"]) >= LBL_WORSE_PP),)
        out.append(GradedRow(PAPER_NAME, f"{paper_model}: LBL's forward far behind DynaComm's", "lead 33.3 pp",
                             "n/a" if gap is None else f"lead {gap:.1f} pp", outcome_of(None if gap is None else gap >= LBL_WORSE_PP),
                             scaled, nulls=nulls, seeds=seeds,
                             sentence="An unscaled 10 ms per transfer on a light model makes LBL slower than Sequential, "
                             "where the paper's LBL beats Sequential on every model."))
    if paper_model.startswith("VGG") and all(s in rows for s in ("lbl", "ibatch", "dynacomm")):
        reds = [rows[s]["fwd_red"] for s in ("lbl", "ibatch", "dynacomm")]
        spread = max(reds) - min(reds)
        nulls = () if seq is None or L is None or "fwd_s" not in seq else (
            _null("the L x delay term alone (LBL pays it, the others none)",
                  f"spread {forward_lead_pp(L, dly, seq['fwd_s']):.1f} pp", forward_lead_pp(L, dly, seq["fwd_s"]) <= CLOSE_PP),)
        out.append(GradedRow(PAPER_NAME, f"{paper_model}: layer-wise methods close in forward", "within 2.3 pp",
                             f"spread {spread:.1f} pp", outcome_of(spread <= CLOSE_PP), scaled, nulls=nulls, seeds=seeds))
    return out


def sweep_rows(points: dict[str, dict[tuple[float, float], dict]], seeds: str = "one paired run per point") -> list[GradedRow]:
    """Rules 1, 2, 3 and 5 of the sweep as rows with their nulls; ``points``: model -> (ratio, delay ms) ->
    {"lead", "check", "seq_s"} (Sequential's median iteration seconds)."""
    out = []

    def null_lead(model, key):
        return iteration_lead(MODEL_LAYERS[model], key[1] / 1000.0, points[model][key]["seq_s"])

    dt, dt_null = [], []
    for model, p in sorted(points.items()):
        for ratio in sorted({r for r, _ in p}):
            ds = sorted(d for r, d in p if r == ratio)
            if len(ds) >= 2:
                lo, hi = (ratio, ds[0]), (ratio, ds[-1])
                dt.append(p[hi]["lead"] > p[lo]["lead"] + DT_RISE)
                dt_null.append(null_lead(model, hi) > null_lead(model, lo) + DT_RISE)
    depth, depth_null = [], []
    for shallow, deep in (("vgg_mini", "resnet_mini"), ("resnet_mini", "resnet152_mini")):
        for key in sorted(set(points.get(shallow, {})) & set(points.get(deep, {}))):
            if key[1] > 0:
                depth.append(points[deep][key]["lead"] >= points[shallow][key]["lead"] - DEPTH_SLACK)
                depth_null.append(null_lead(deep, key) >= null_lead(shallow, key) - DEPTH_SLACK)
    checks = [q["check"] for p in points.values() for q in p.values()]
    checks_null = [check_holds(MODEL_LAYERS[m], k[1] / 1000.0, q["seq_s"]) for m, p in points.items() for k, q in p.items()]
    scaled = _scaled("the four mini models", 10.0).replace("10 ms", "0 / 10 / 20 ms")
    L_delay = "the L x delay term alone"

    def row(claim, paper, vals, nvals, null_name=L_delay):
        nulls = (NullResult(null_name, f"holds at {sum(nvals)} of {len(nvals)}", outcome_of(all(nvals))),) if nvals else ()
        return GradedRow(PAPER_NAME, claim, paper, f"holds at {sum(vals)} of {len(vals)}",
                         outcome_of(all(vals)) if vals else NOT_DECIDABLE, scaled, nulls=nulls, seeds=seeds)
    out.append(row("Sweep rule 1: DynaComm's lead over LBL grows with the per-transfer delay", "from Δt", dt, dt_null))
    out.append(row("Sweep rule 2: the lead is larger on the deeper model", "\"when the network goes deeper\"", depth, depth_null))
    out.append(row("Sweep rule 3: DynaComm no slower than 1.03 x the best baseline", "DynaComm best", checks,
                   checks_null, "no overlap gain (DynaComm = Sequential, the others no faster)"))
    deep = points.get("resnet152_mini", {}).get((1.0, 10.0))
    if deep is not None:
        n = null_lead("resnet152_mini", (1.0, 10.0))
        out.append(GradedRow(PAPER_NAME, "Sweep rule 5: ResNet-152 depth at ratio 1 and 10 ms, lead over LBL > 0.10",
                             "LBL -10.56 % vs DynaComm -43.84 % forward", f"lead {deep['lead']:+.3f}",
                             outcome_of(deep["lead"] > DEEP_LEAD), _scaled("resnet152_mini", 10.0), seeds=seeds,
                             nulls=(_null(L_delay, f"lead {n:+.3f}", n > DEEP_LEAD),)))
    return out


def graded_rows(result_dir) -> list[GradedRow]:
    """Every graded row of the item's rounds and sweep under ``result_dir`` (empty when none is there)."""
    from .sweep import load_sweep, sweep_point

    out: list[GradedRow] = []
    scaled = setting_rows(result_dir)
    judged_scaled = {r.extra.get("model") for r in scaled if r.counted}
    for model, m in dynacomm_summary(result_dir)["models"].items():
        if model in PAPER:
            rounds = max((r.get("rounds", 0) for r in m["rows"].values()), default=0)
            beside = model in judged_scaled  # rule 2: judged at the scaled delay, the 10 ms rows beside
            out += claim_rows(model, PAPER[model]["paper_model"], PAPER[model], m["rows"], m.get("link_delay_ms") or 0.0,
                              f"{rounds} rounds", counted=not beside,
                              reading="10 ms unscaled, beside the scaled delay" if beside else "")
    out += scaled
    points: dict[str, dict] = {}
    for model, pts in load_sweep(result_dir).items():
        for key, d in pts.items():
            q = sweep_point(d)
            if q is not None and model in MODEL_LAYERS:
                points.setdefault(model, {})[key] = dict(lead=q["lead"], check=q["check"], seq_s=q["iteration_s"]["sequential"])
    return out + (sweep_rows(points) if points else [])


COUNTED_SETTING = "r1-scaled"  # rule 2's judged rows; the Jetson-class ratio (rule 3) is reported beside


def setting_rows(result_dir) -> list[GradedRow]:
    """The claims of the ``dynacomm-scaled`` item's scaled settings (``R/dynacomm/<setting>/``), each row naming its
    ratio and delay and carrying the scaling argument when the plans' measured per-transfer cost reached ``d_ours``
    (:func:`rog.papers.dynacomm.scaling.argument_holds`); :data:`COUNTED_SETTING` counted, the others beside."""
    from pathlib import Path


    out: list[GradedRow] = []
    for setting, (ratio, delay) in SETTINGS.items():
        if delay != "scaled":
            continue
        for model, m in dynacomm_summary(result_dir, sub=setting)["models"].items():
            if model not in PAPER:
                continue
            cal = Path(result_dir) / "dynacomm" / f"calibrate-{model}" / "result.json"
            d_ours = scaled_delay_ms(json.loads(cal.read_text()), model) if cal.is_file() else m.get("link_delay_ms")
            dt = (m["rows"].get("dynacomm") or {}).get("dt_s")
            arg = scaling_argument(model, d_ours or 0.0, None if dt is None else 1e3 * dt)
            rounds = max((r.get("rounds", 0) for r in m["rows"].values()), default=0)
            counted = setting == COUNTED_SETTING
            rows = claim_rows(model, PAPER[model]["paper_model"], PAPER[model], m["rows"], m.get("link_delay_ms") or 0.0,
                              f"{rounds} rounds ({setting})", ratio=ratio, delay_scaled=True, argument=arg,
                              counted=counted, reading="" if counted else f"{setting}: the Jetson-class ratio, beside")
            why = "" if arg else (
                f"Not the scaled setting: the plans measured {'no' if dt is None else f'{1e3 * dt:.3f} ms'} per-transfer "
                f"cost against d_ours = {d_ours or 0.0:.3f} ms (argued only within a factor 2). ")
            out += [GradedRow(**{**r.__dict__, "sentence": why + r.sentence,
                                 "extra": {"model": model, "setting": setting, "d_ours_ms": d_ours,
                                           "measured_dt_ms": None if dt is None else 1e3 * dt}})
                    for r in rows]
    return out


def scaled_markdown(result_dir) -> str:
    """``R/dynacomm/scaled.md``: every scaled setting's claims with their grades (ratio and delay in each row)."""
    from rog.analysis.grades import rows_markdown

    rows = setting_rows(result_dir)
    if not rows:
        return "# DynaComm: the scaled settings\n\nNo scaled setting has run yet.\n"
    return "# DynaComm: the scaled settings (rules 2 and 3)\n\n" + "\n".join(rows_markdown(rows)) + "\n"


def _documented_setting(model: str, setting: str, rows: dict, d_ours: float, dt_ms: float | None) -> list[GradedRow]:
    """One scaled setting's rows from the numbers docs/dynacomm.md reports, graded as :func:`setting_rows` grades them."""
    ratio = SETTINGS[setting][0]
    counted = setting == COUNTED_SETTING
    arg = scaling_argument(model, d_ours, dt_ms)
    out = claim_rows(model, PAPER[model]["paper_model"], PAPER[model], rows, d_ours, f"3 rounds ({setting})",
                     ratio=ratio, delay_scaled=True, argument=arg, counted=counted,
                     reading="" if counted else f"{setting}: the Jetson-class ratio, beside")
    why = "" if arg else (f"Not the scaled setting: the plans measured {dt_ms:.3f} ms per-transfer cost against "
                          f"d_ours = {d_ours:.3f} ms (argued only within a factor 2). ")
    return [GradedRow(**{**r.__dict__, "sentence": why + r.sentence}) for r in out]


def documented_rows() -> list[GradedRow]:
    """The rows as docs/dynacomm.md reports the last runs: the ``dynacomm-scaled`` item (7 Dec 2026; 3 rounds per
    setting on vgg_mini and resnet152_mini: ratio 1 at the scaled delay counted, ratio 1 at 10 ms and the
    Jetson-class ratio beside) and the sweep on four models, graded alike."""
    out: list[GradedRow] = []
    d_ours = {"vgg_mini": 1.109, "resnet152_mini": 0.277}
    scaled = {  # setting -> model -> (schedule -> (forward reduction %, iteration reduction %), Sequential's fwd s, DynaComm's Δt ms)
        "r1-scaled": {"vgg_mini": ({"lbl": (40.2, 40.3), "ibatch": (36.1, 39.6), "dynacomm": (40.7, 43.0)}, 0.694, 0.639),
                      "resnet152_mini": ({"lbl": (-65.2, -70.8), "ibatch": (14.9, -21.9), "dynacomm": (12.9, 7.1)}, 0.228, 1.886)},
        "jetson-scaled": {"vgg_mini": ({"lbl": (13.955, 16.0), "ibatch": (14.119, 16.2), "dynacomm": (14.109, 16.2)}, 2.149, 0.097),
                          "resnet152_mini": ({"lbl": (5.6, 6.0), "ibatch": (16.3, 12.7), "dynacomm": (18.5, 16.7)}, 0.599, 0.061)},
    }
    for setting, models in scaled.items():
        for model, (reds, seq_fwd_s, dt_ms) in models.items():
            rows = {"sequential": dict(fwd_s=seq_fwd_s, fwd_red=0.0, it_red=0.0),
                    **{s: dict(fwd_red=f, it_red=i) for s, (f, i) in reds.items()}}
            out += _documented_setting(model, setting, rows, d_ours[model], dt_ms)
    beside = "10 ms unscaled, beside the scaled delay"
    r10 = {"vgg_mini": ({"lbl": (32.8, 32.6), "ibatch": (34.7, 34.6), "dynacomm": (32.4, 23.2)}, 0.736),
           "resnet152_mini": ({"lbl": (-729.125, -689.6), "ibatch": (9.8, -331.1), "dynacomm": (4.030, 1.0)}, 0.2337)}
    for model, (reds, seq_fwd_s) in r10.items():
        rows = {"sequential": dict(fwd_s=seq_fwd_s, fwd_red=0.0, it_red=0.0),
                **{s: dict(fwd_red=f, it_red=i) for s, (f, i) in reds.items()}}
        out += claim_rows(model, PAPER[model]["paper_model"], PAPER[model], rows, 10.0, "3 rounds (r1-d10)",
                          counted=False, reading=beside)
    res23 = {"sequential": dict(fwd_s=0.079, iteration_s=0.184, fwd_red=0.0, it_red=0.0),
             "lbl": dict(fwd_red=-294.8), "dynacomm": dict(fwd_red=18.1, it_red=7.0)}
    for r in claim_rows("resnet_mini", "ResNet-152", PAPER["resnet152_mini"], res23, 10.0, "3 rounds"):
        out.append(GradedRow(**{**r.__dict__, "claim": r.claim + " (on the 23-layer resnet_mini)", "counted": False,
                                "reading": "graded before issue 52 on resnet_mini"}))
    # Sequential's iteration (s) and the lead at 10 ms per (model, ratio), docs/dynacomm.md's sweep tables
    seq = {"resnet_mini": {0.25: 0.168, 1.0: 0.180, 4.0: 0.372}, "resnet152_mini": {0.25: 0.404, 1.0: 0.672, 4.0: 2.160}}
    lead10 = {"resnet_mini": {0.25: 2.755, 1.0: 2.498, 4.0: 1.174}, "resnet152_mini": {0.25: 8.769, 1.0: 5.415, 4.0: 1.342}}
    points = {m: {(r, 10.0): dict(lead=lead10[m][r], check=True, seq_s=t) for r, t in v.items()} for m, v in seq.items()}
    null = {r.claim.split(":")[0]: r.nulls for r in sweep_rows(points)}
    dt_null = [iteration_lead(MODEL_LAYERS[m], 0.020, t) > iteration_lead(MODEL_LAYERS[m], 0.0, t) + DT_RISE
               for m, v in seq.items() for t in v.values()]
    n = iteration_lead(MODEL_LAYERS["resnet152_mini"], 0.010, 0.672)
    docs = "one paired run per point, 36 points"
    four = _scaled("the four mini models", 10.0)
    out += [GradedRow(PAPER_NAME, "Sweep rule 1: DynaComm's lead over LBL grows with the per-transfer delay", "from Δt",
                      "holds at 8 of 12 (model, ratio) cells", DOES_NOT, four, seeds=docs,
                      nulls=(NullResult("the L x delay term alone", f"holds at {sum(dt_null)} of {len(dt_null)} cells "
                                        "(the ResNets', Sequential's time at 10 ms)", outcome_of(all(dt_null))),)),
            GradedRow(PAPER_NAME, "Sweep rule 2: the lead is larger on the deeper model", "\"when the network goes deeper\"",
                      "holds at 12 of 12", AGREES, four, seeds=docs, nulls=null["Sweep rule 2"]),
            GradedRow(PAPER_NAME, "Sweep rule 3: DynaComm no slower than 1.03 x the best baseline", "DynaComm best",
                      "holds at 29 of 36", DOES_NOT, four, seeds=docs, nulls=null["Sweep rule 3"]),
            GradedRow(PAPER_NAME, "Sweep rule 4: GoogLeNet-like layer-wise schedules similar", "similar to VGG-19",
                      "holds at 2 of 3 ratios", DOES_NOT, _scaled("inception_mini", 10.0), seeds=docs),
            GradedRow(PAPER_NAME, "Sweep rule 5: ResNet-152 depth at ratio 1 and 10 ms, lead over LBL > 0.10",
                      "LBL -10.56 % vs DynaComm -43.84 % forward", "lead +5.415", AGREES, _scaled("resnet152_mini", 10.0),
                      seeds="one paired run", nulls=(_null("the L x delay term alone", f"lead {n:+.3f}", n > DEEP_LEAD),)),
            GradedRow(PAPER_NAME, "Item check: DynaComm <= 1.03 x the best other schedule (paired runs)", "DynaComm best",
                      "0.971 x (resnet_mini), 0.979 x (vgg_mini)", AGREES, _scaled("resnet_mini, vgg_mini", 10.0),
                      seeds="6 rotations per model",
                      nulls=(NullResult("no overlap gain (DynaComm = Sequential)", "holds on both models", outcome_of(
                          check_holds(MODEL_LAYERS["resnet_mini"], 0.010, 0.190)
                          and check_holds(MODEL_LAYERS["vgg_mini"], 0.010, 1.173))),))]
    return out
