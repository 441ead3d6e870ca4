"""``python -m benchmarks.timing [GROUP ...]``: print every timing figure against its reference, the summary as
JSON on the last line; exit 1 when a figure is off (run it on a quiet machine)."""

from __future__ import annotations

import argparse
import json
import sys

from .suite import GROUPS, run_groups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.timing", description=__doc__)
    ap.add_argument("groups", nargs="*", metavar="GROUP", help=f"groups to run (default all): {', '.join(GROUPS)}")
    args = ap.parse_args(argv)
    try:
        summary = run_groups(args.groups)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0 if summary["held"] == summary["measured"] else 1


if __name__ == "__main__":
    sys.exit(main())
