"""utils/tier_report.py: the per-tier lines and the total that ``scripts/test.sh --all`` ends with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("tier_report", ROOT / "utils" / "tier_report.py")
tier_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tier_report)


def _xml(tests: int, failures: int = 0, errors: int = 0, skipped: int = 0) -> str:
    return (f'<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="{tests}" failures="{failures}" '
            f'errors="{errors}" skipped="{skipped}"></testsuite></testsuites>')


def _tier(folder: Path, i: int, name: str, rc: int, seconds: int, xml: str | None) -> None:
    (folder / f"{i}-{name}.rc").write_text(f"{rc} {seconds}\n")
    if xml is not None:
        (folder / f"{i}-{name}.xml").write_text(xml)


def test_all_green_sums_every_tier(tmp_path, capsys):
    _tier(tmp_path, 0, "default", 0, 400, _xml(1270, skipped=5))
    _tier(tmp_path, 1, "slow", 0, 900, _xml(30))
    _tier(tmp_path, 2, "faults", 0, 300, _xml(10))
    assert tier_report.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "tier default: 1265 passed, 0 failed, 5 skipped, 0 errors in 400 s (exit 0)"
    assert lines[-1] == "all tiers: 1305 passed, 0 failed, 5 skipped"


def test_a_failing_or_empty_tier_fails_the_whole_run(tmp_path, capsys):
    _tier(tmp_path, 0, "default", 0, 400, _xml(10))
    _tier(tmp_path, 1, "slow", 1, 900, _xml(8, failures=1, errors=1))
    _tier(tmp_path, 2, "faults", 5, 3, _xml(0))  # pytest's exit 5: it collected no test
    assert tier_report.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "failing tiers: slow (exit 1), faults (exit 5, ran no test)" in out
    assert out.strip().splitlines()[-1] == "all tiers: 16 passed, 2 failed, 0 skipped"


def test_a_tier_without_its_report_counts_as_not_run(tmp_path, capsys):
    _tier(tmp_path, 0, "default", 2, 1, None)  # pytest stopped before writing its report (usage error)
    assert tier_report.main([str(tmp_path)]) == 1
    assert "default (exit 2, ran no test)" in capsys.readouterr().out
    assert tier_report.main([str(tmp_path / "absent")]) == 2
