"""The one module-item protocol (rog.experiment.module_item) on a throwaway item: its steps run once and are
skipped when done, the framework writes the summary, a blocked step fails the item, a mode runs no step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rog.experiment.module_item import Blocked, ItemError, ModuleItem, Step, Summary, item_main


def _writer(folder: Path, calls: Path) -> list[str]:
    """python arguments that write ``folder/result.json`` and count the call in ``calls``."""
    code = (f"import pathlib; d = pathlib.Path({str(folder)!r}); d.mkdir(parents=True, exist_ok=True); "
            f"(d / 'result.json').write_text('{{\"v\": 3}}'); open({str(calls)!r}, 'a').write('x')")
    return ["-c", code]


def _toy(tmp_path: Path, fail_second: bool = False) -> ModuleItem:
    calls = tmp_path / "calls"

    def steps(a):
        first = Path(a.result_dir) / "toy" / "first"
        yield Step("first", _writer(first, calls), (first / "result.json").exists())
        got = json.loads((first / "result.json").read_text())["v"] if (first / "result.json").exists() else None
        if got is None or fail_second:  # the second step reads the first's result
            yield Blocked("second", "no first result")
            return
        second = Path(a.result_dir) / "toy" / f"second-{got}"
        yield Step(f"second with v={got}", _writer(second, calls), (second / "result.json").exists())

    def summarise(a, rc):
        done = sorted(p.parent.name for p in (Path(a.result_dir) / "toy").glob("*/result.json"))
        if not done:
            raise ItemError("nothing to read")
        return Summary("# toy\n\n" + ", ".join(done) + "\n", doc={"done": done}, figures=[],
                       last_line={"n": len(done)})

    def check(a, ap):
        if a.count_only:
            print("mode: no step")
            return 5
        return None

    return ModuleItem(tag="toy", folder="toy", prog="toy", doc="A throwaway item.", steps=steps, summarise=summarise,
                      estimate_s=lambda a: 90.0, check=check,
                      arguments=lambda ap: ap.add_argument("--count-only", action="store_true"))


def test_steps_run_once_resume_and_the_framework_writes_the_summary(tmp_path, capsys):
    item, r = _toy(tmp_path), tmp_path / "r"
    args = ["--result-dir", str(r), "--figure-dir", str(tmp_path / "f")]
    assert item_main(item, args + ["--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    # a dry run lists the first step; the second needs its result, so it is listed as blocked (not a failure)
    assert out == ["[toy] run: first", "[toy] run: second", "[toy] estimate 2 min"] and not r.exists()
    assert item_main(item, args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["[toy] run: first", "[toy] run: second with v=3"]
    assert out[2] == f"[toy] wrote {r / 'toy' / 'summary.md'} and 0 figure(s)" and json.loads(out[3]) == {"n": 2}
    assert (r / "toy" / "summary.md").read_text() == "# toy\n\nfirst, second-3\n"
    assert json.loads((r / "toy" / "summary.json").read_text()) == {"done": ["first", "second-3"]}
    assert item_main(item, args) == 0  # everything done: nothing runs again
    assert capsys.readouterr().out.count("skip (done)") == 2 and (tmp_path / "calls").read_text() == "xx"


def test_a_blocked_step_fails_the_item_and_a_mode_runs_nothing(tmp_path, capsys):
    args = ["--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")]
    assert item_main(_toy(tmp_path, fail_second=True), args) == 1
    assert "[toy] cannot run (no first result): second" in capsys.readouterr().out
    assert item_main(_toy(tmp_path), args + ["--count-only"]) == 5
    assert capsys.readouterr().out == "mode: no step\n"


def test_nothing_to_read_is_an_error_and_no_summary_is_written(tmp_path, capsys):
    empty = ModuleItem(tag="toy", folder="toy", prog="toy", doc=None, steps=lambda a: iter(()),
                       summarise=lambda a, rc: (_ for _ in ()).throw(ItemError("nothing to read")),
                       estimate_s=lambda a: None)
    assert item_main(empty, ["--result-dir", str(tmp_path / "r")]) == 1
    assert "[toy] nothing to read" in capsys.readouterr().err and not (tmp_path / "r").exists()
    with pytest.raises(SystemExit):  # an unknown flag is refused by the item's parser
        item_main(empty, ["--no-such-flag"])
