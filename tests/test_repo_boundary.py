"""Product code reads nothing outside the repository: the default trace is the same in a fresh clone
and in a tree with a sibling folder of development traces, summary.md says which trace source the
runs used, and no source file under rog/ or scripts/ names a path outside the repository."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from rog.analysis.provenance import trace_source_line
from rog.experiment import traceplan as TP

ROOT = Path(__file__).resolve().parents[1]


def _tree(tmp_path: Path, with_sibling_traces: bool) -> Path:
    repo = tmp_path / "repo"
    (repo / "configs" / "traces").mkdir(parents=True)
    (repo / "configs" / "traces" / "outdoors-synth.csv").write_text("t_s,mbps\n0,1\n1,2\n")
    if with_sibling_traces:
        (tmp_path / "shared" / "traces").mkdir(parents=True)
        (tmp_path / "shared" / "traces" / "outdoors-w1.csv").write_text("t_s,mbps\n0,5\n1,6\n")
    return repo


def test_default_trace_ignores_folders_beside_the_checkout(tmp_path):
    fresh = _tree(tmp_path / "a", with_sibling_traces=False)
    dev = _tree(tmp_path / "b", with_sibling_traces=True)
    nodata = tmp_path / "nodata"
    got_fresh = TP.default_trace("outdoors", fresh, nodata)
    got_dev = TP.default_trace("outdoors", dev, nodata)
    assert got_fresh[1] == got_dev[1] == "synthetic"
    assert got_dev[0] == (dev / "configs" / "traces" / "outdoors-synth.csv").resolve()
    # the downloaded record wins over the synthetic trace in both trees
    data = tmp_path / "data"
    (data / "bw_records").mkdir(parents=True)
    (data / "bw_records" / "outdoors.txt").write_text("0 1\n1 2\n")
    assert TP.default_trace("outdoors", dev, data) == ((data / "bw_records" / "outdoors.txt").resolve(), "record")


def _run(kind: str | None, path: str = "x.csv"):
    from rog.analysis.load import RunData

    return RunData(Path("r"), "r", {"trace": None if kind is None else {"kind": kind, "path": path}}, "done", 0.0, None)


def test_summary_says_which_trace_source_the_runs_used():
    line = trace_source_line([_run("synthetic", "/r/configs/traces/outdoors-synth.csv")] * 3)
    assert line.startswith("- Trace source: synthetic (outdoors-synth.csv, 3 runs).")
    assert "utils/download_data.sh" in line
    line = trace_source_line([_run("record", "/r/data/bw_records/outdoors.txt"), _run("user", "/tmp/mine.csv"),
                              _run(None)])
    assert line == ("- Trace source: none (unshaped links) (1 run); recorded (outdoors.txt, 1 run); "
                    "user file (mine.csv, 1 run).")


def test_summary_md_opens_with_the_trace_source(tmp_path):
    import yaml

    from rog.analysis.summary import write_summary
    from test_analysis import make_run

    for name in ("BSP-a", "ROG4-a"):
        d = make_run(tmp_path, name, system=name.split("-")[0].rstrip("4"), threshold=0 if name[0] == "B" else 4)
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        cfg["trace"] = {"kind": "synthetic", "path": "/x/configs/traces/outdoors-synth.csv"}
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    _, md = write_summary(tmp_path)
    first = md.read_text().splitlines()[:3]
    assert first[0] == "# Results summary"
    assert first[2].startswith("- Trace source: synthetic (outdoors-synth.csv, 2 runs).")


OUTSIDE = re.compile(r"""\.\./shared|/work/|parent\s*/\s*["']shared["']|["']shared["']\s*/\s*["']traces""")


def test_no_source_under_rog_or_scripts_names_a_path_outside_the_repository():
    hits = []
    for top in ("rog", "scripts"):
        for f in sorted((ROOT / top).rglob("*")):
            if f.suffix in (".py", ".sh") and f.is_file():
                for i, line in enumerate(f.read_text().splitlines(), 1):
                    if OUTSIDE.search(line):
                        hits.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)


def test_the_analysis_reads_config_yaml_only_through_rundata():
    """rog/analysis and rog/papers read a run's config.yaml through RunData's named properties (load.py), never
    by key at the call site: a key renamed by the upgrader then changes in one place."""
    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\bconfig\.get\(|\bconfig\[")
    hits = [f"{p.relative_to(root)}:{n}" for d in ("rog/analysis", "rog/papers") for p in sorted((root / d).rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line.split("#", 1)[0])]
    assert hits == [], hits
