"""The streaming measurements' rules (rog/papers/intradp/streaming.py) on made-up sweep rows, by hand."""

from __future__ import annotations

import json

import pytest

from rog.papers.intradp.streaming import main, point_verdict, sweep_verdicts


def _row(plan, lat, sd, model, n=8):
    return {"kind": "stream", "rate_mbit": 20.0, "plan": plan, "n": n, "latency_s": lat, "latency_sd_s": sd,
            "model_latency_s": model, "model_error": model / lat - 1}


def test_point_verdict_needs_twice_the_standard_error():
    one = _row("p", 0.200, 0.008, 0.2)  # se of the difference: sqrt(2 x 0.008^2 / 8) = 0.004
    assert point_verdict(one, _row("p~2", 0.191, 0.008, 0.2)) == "pays"  # 9 ms > 8 ms
    assert point_verdict(one, _row("p~2", 0.193, 0.008, 0.2)) == "not measurable"  # 7 ms
    assert point_verdict(one, _row("p~2", 0.209, 0.008, 0.2)) == "costs"


def test_the_model_picks_the_band_count_not_the_measurement():
    rows = [_row("loss[0,5]x0.5->server", 0.200, 0.0, 0.210),
            _row("loss[0,5]x0.5->server~2", 0.150, 0.0, 0.190),  # measured faster, modelled slower than 4 bands
            _row("loss[0,5]x0.5->server~4", 0.230, 0.0, 0.180)]
    s = sweep_verdicts({"model": "m", "sweep": rows + [dict(rows[0], kind="loss")]})
    (p,) = s["points"]
    assert p["bands"] == 4 and p["verdict"] == "costs"
    assert p["gain_pct"] == pytest.approx(-15.0) and p["model_gain_pct"] == pytest.approx(100 * (1 - 0.18 / 0.21))
    assert p["sign_agrees"] is False and s["verdicts"] == {"pays": 0, "costs": 1, "not measurable": 0}
    assert s["model_error"]["n"] == 3 and s["model_error"]["max_abs"] == pytest.approx(0.19 / 0.15 - 1)  # the largest of 0.05, 0.267, 0.217


def test_command_names_a_folder_without_results(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--sweep", str(tmp_path)])
    assert "no result.json" in capsys.readouterr().err
    (tmp_path / "result.json").write_text(json.dumps({"model": "m", "sweep": []}))
    assert main(["--sweep", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["sweeps"][0]["points"] == []


def test_a_modelled_gain_of_zero_does_not_agree_with_a_measured_one():
    rows = [_row("p", 0.200, 0.0, 0.2), _row("p~2", 0.180, 0.0, 0.2), _row("p~4", 0.190, 0.0, 0.21)]
    (p,) = sweep_verdicts({"sweep": rows})["points"]
    assert p["bands"] == 2 and p["verdict"] == "pays" and p["model_gain_pct"] == 0.0 and p["sign_agrees"] is False


def _fake_outputs(base, seeds):
    """Every step's output, made up: each trace run's stream planner 10 % faster than intra-dp-loss."""
    from rog.papers.intradp.streaming_item import ENVIRONMENTS, MODELS

    for m in MODELS:
        (base / f"sweep-{m}").mkdir(parents=True)
        rows = [_row("p", 0.2, 0.0, 0.2), _row("p~2", 0.19, 0.0, 0.195), _row("p~4", 0.21, 0.0, 0.2)]
        (base / f"sweep-{m}" / "result.json").write_text(json.dumps({"model": m, "sweep": rows}))
    (base / "traces").mkdir()
    for s in seeds:
        for env in ENVIRONMENTS:
            (base / "traces" / f"{env}-seed{s}.csv").write_text("t,mbit\n")
            for m in MODELS:
                d = base / f"trace-{m}-{env}-{s}"
                d.mkdir()
                tables = {"intra-dp-loss": [{"rate_mbit": 5.0, "model_latency_s": 0.3}, {"rate_mbit": 10.0, "model_latency_s": 0.2}],
                          "intra-dp-stream": [{"rate_mbit": 5.0, "model_latency_s": 0.3}, {"rate_mbit": 10.0, "model_latency_s": 0.19}]}
                (d / "result.json").write_text(json.dumps({
                    "model": m, "trace": f"x/{env}-seed{s}.csv", "tables": tables, "output_checked": 4, "output_mismatches": 0,
                    "methods": {"intra-dp-loss": {"mean_latency_s": 0.2}, "intra-dp-stream": {"mean_latency_s": 0.18}}}))
                recs = [{"planner": "intra-dp-loss", "level_mbit": 5.0}] * 2 + [{"planner": "intra-dp-stream", "level_mbit": 10.0,
                                                                               "bands": 2}, {"planner": "intra-dp-stream", "level_mbit": 10.0}]
                (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_streaming_item_steps_and_summary(tmp_path, capsys):
    from rog.papers.intradp import streaming_item as S

    steps = S.steps(tmp_path, (7, 8))
    assert len(steps) == 2 + 2 * 2 * 3  # two sweeps; per seed and environment one trace and two runs
    made = set()
    for path, args in steps:  # a trace is made before the runs that replay it
        if "--trace" in args:
            assert args[args.index("--trace") + 1] in made
        made.add(path)
    _fake_outputs(tmp_path / "intradp_streaming", (7, 8))
    assert S.main(["--result-dir", str(tmp_path), "--seeds", "7,8"]) == 0
    assert capsys.readouterr().out.count("skip (done)") == len(steps)
    doc = json.loads((tmp_path / "intradp_streaming" / "summary.json").read_text())
    assert doc["complete"] is True and len(doc["traces"]["runs"]) == 8
    g = doc["traces"]["groups"]["vgg19 indoors"]
    # both tables at the four inferences' levels (5, 5, 10, 10): 1 - 0.245 / 0.25 = 2 %
    assert g["gain_pct_median"] == pytest.approx(10.0) and g["model_gain_pct_median"] == pytest.approx(2.0)
    assert g["streamed_share"] == pytest.approx(0.5)
    (tmp_path / "intradp_streaming" / "trace-vgg19-indoors-8" / "result.json").unlink()
    S.main(["--result-dir", str(tmp_path), "--seeds", "7,8", "--dry-run"])  # the missing run is listed to run
    assert "run: python -m rog.inference.experiment trace --model vgg19" in capsys.readouterr().out


def test_the_summary_section_shows_the_streaming_item(tmp_path):
    import types

    from rog.papers.intradp.section import summary_section

    ctx = types.SimpleNamespace(result_dir=tmp_path)  # the only field the section reads
    assert summary_section(ctx) is None  # nothing ran
    d = tmp_path / "intradp_streaming"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"complete": False, "sweeps": [], "traces": None}))
    (d / "summary.md").write_text("# Intra-DP: rows sent as they finish\n\n**Incomplete**\n")
    part = summary_section(ctx)
    assert part.entries == {"intradp_streaming": {"complete": False, "sweeps": [], "traces": None}}
    assert part.markdown.startswith("## Intra-DP: rows sent as they finish") and "**Incomplete**" in part.markdown
