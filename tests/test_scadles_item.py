"""The ``scadles`` item: opt-in, its steps parse as run.py flags, the step-module interface (missing
modules skipped with a line, completed steps skipped, summary and figures from every module), and the
analysis of data_wait records (buffer law, truncation bound) on a hand-made event log."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import yaml

from rog.experiment import items as I
from rog.papers.scadles import item as SI
from rog.papers.scadles import stream_steps as SS


def test_opt_in_and_known_by_name():
    assert "scadles" not in I.ITEM_NAMES
    assert I.MODULE_ITEMS["scadles"] == "rog.papers.scadles.item"
    assert I.items_for(["scadles"]) == []


def test_every_stream_step_parses_as_run_py_flags(tmp_path):
    from rog.experiment.cli import parse_args

    st = SS.steps(tmp_path)
    assert len(st) == len(SS.STEPS)
    for folder, argv in st:
        assert argv[:2] == ["-m", "rog.experiment"] and argv[argv.index("--result-dir") + 1] == folder
        a = parse_args(argv[2:])
        assert a.stream_set in ("S1", "S2", "S1p", "S2p") and a.time_budget_s == SS.BUDGET_S


def test_a_missing_step_module_is_an_error_naming_it():
    assert [m.__name__ for m in SI.step_modules(("rog.papers.scadles.stream_steps",))] == [
        "rog.papers.scadles.stream_steps"]
    with pytest.raises(SI.StepModuleError, match="no_such_steps_module is not in this tree"):
        SI.step_modules(("rog.papers.scadles.stream_steps", "rog.experiment.no_such_steps_module"))


def test_step_done_markers(tmp_path):
    assert not SI.step_done(tmp_path / "none")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "result.json").write_text("{}")
    (tmp_path / "b" / "RUN").mkdir(parents=True)
    assert SI.step_done(tmp_path / "a") and not SI.step_done(tmp_path / "b")
    (tmp_path / "b" / "RUN" / "DONE").write_text("{}")
    assert SI.step_done(tmp_path / "b")


def test_main_runs_steps_once_and_writes_summary(tmp_path, monkeypatch):
    mod = types.ModuleType("fake_scadles_steps")
    mod.ESTIMATE_S = 1.0

    def steps(result_dir):
        out = []
        for name in ("one", "two"):
            d = Path(result_dir) / "scadles" / name
            code = f"import pathlib; d = pathlib.Path({str(d)!r}); d.mkdir(parents=True, exist_ok=True); " \
                   f"(d / 'result.json').write_text('{{}}'); open({str(tmp_path / 'calls')!r}, 'a').write('x')"
            out.append((str(d), ["-c", code]))
        return out

    mod.steps = steps
    mod.markdown = lambda result_dir: "## fake rows\n"
    mod.plot = lambda result_dir, figure_dir: [Path(figure_dir) / "scadles_fake.png"]
    monkeypatch.setitem(sys.modules, "fake_scadles_steps", mod)
    monkeypatch.setattr(SI, "STEP_MODULES", ("fake_scadles_steps",))
    args = ["--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")]
    assert SI.main(args) == 0
    assert SI.main(args) == 0  # second time: both steps done, skipped
    assert (tmp_path / "calls").read_text() == "xx"
    md = (tmp_path / "r" / "scadles" / "summary.md").read_text()
    assert "## fake rows" in md


def _write_run(tmp_path, rate, batch, iter_s, T, buffer="persistence"):
    """A run folder with one worker's data_wait records from the closed forms (no training)."""
    from rog.runtime import EventLog, events_file_name

    run = tmp_path / "run"
    run.mkdir()
    cfg = dict(run_id="x", library="BSP", threshold=0, workers=1, stream=dict(rates=[rate], batches=[batch], buffer=buffer))
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    cap = max(rate, batch)
    with EventLog(run / events_file_name("w0"), "w0", "x", 0.0) as ev:
        for n in range(1, T + 2):
            held = (iter_s * rate - batch) * (n - 1) + rate
            if buffer == "truncate":
                held = min(held, cap)
            ev.write("data_wait", (n - 1) * iter_s, iteration=n, duration_s=0.0, worker=0, batch=batch,
                     buffer=int(held), buffer_after=int(held) - batch, dropped=0, arrived=0, analytic_s=0.0)
    return run


def test_buffer_law_and_truncation_bound_from_records(tmp_path):
    from rog.analysis.load import load_run
    from rog.papers.scadles.stream_runs import buffer_law, truncation_bound

    r = load_run(_write_run(tmp_path, 200.0, 40, 0.5, 100))
    (law,) = buffer_law(r)
    assert law["iterations"] == 100 and law["iter_s"] == pytest.approx(0.5)
    assert law["predicted"] == pytest.approx((0.5 * 200 - 40) * 100 + 200)
    assert abs(law["rel_err"]) < 1e-3 and law["accumulating"]
    (tb,) = truncation_bound(r)
    assert tb["max_held"] > tb["bound"]  # persistence is not bounded
