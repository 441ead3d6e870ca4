"""Sum the test tiers that ``bash scripts/test.sh --all`` ran: one line per tier, then the total.

Reads ``<i>-<tier>.xml`` (pytest's JUnit report) and ``<i>-<tier>.rc`` ("exit-status seconds") from the
folder given; prints each tier's counts and wall time, then ``all tiers: N passed, N failed, N skipped``
on the last line, and exits non-zero when any tier failed, errored or ran no test.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

KEYS = ("passed", "failed", "skipped", "errors")


def tier_counts(xml_path: Path) -> dict:
    """passed / failed / skipped / errors of one JUnit report (every testsuite in it summed)."""
    root = ET.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = dict.fromkeys(KEYS, 0)
    for s in suites:
        tests, fail = int(s.get("tests", 0)), int(s.get("failures", 0))
        err, skip = int(s.get("errors", 0)), int(s.get("skipped", 0))
        out["failed"] += fail
        out["errors"] += err
        out["skipped"] += skip
        out["passed"] += tests - fail - err - skip
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: tier_report.py REPORT_DIR (the folder scripts/test.sh --all fills)", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    total = dict.fromkeys(KEYS, 0)
    bad = []
    for rc_file in sorted(folder.glob("*.rc")):
        tier = rc_file.stem.split("-", 1)[1]
        rc, seconds = (int(x) for x in rc_file.read_text().split())
        xml = rc_file.with_suffix(".xml")
        counts = tier_counts(xml) if xml.exists() else dict.fromkeys(KEYS, 0)
        for k in KEYS:
            total[k] += counts[k]
        ran = counts["passed"] + counts["failed"] + counts["errors"]
        if rc != 0 or ran == 0:
            bad.append(f"{tier} (exit {rc}{', ran no test' if ran == 0 else ''})")
        print(f"tier {tier}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped, "
              f"{counts['errors']} errors in {seconds} s (exit {rc})")
    if bad:
        print(f"failing tiers: {', '.join(bad)}")
    print(f"all tiers: {total['passed']} passed, {total['failed'] + total['errors']} failed, {total['skipped']} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
