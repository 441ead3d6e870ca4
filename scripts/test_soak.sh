#!/usr/bin/env bash
# The suite's steadiness under load: `bash scripts/test.sh` RUNS times in a row (default 5) in a fresh clone of
# this repository's HEAD, while BUSY busy-loop processes (default 2) compete for the CPU beside it; the loops are
# started and ended here (also on failure or Ctrl-C).  Prints one line per run and ends with
# `soak: K of N green (M busy loops)`; exits 0 iff every run passed.
#   bash scripts/test_soak.sh                 # 5 runs of the default tier beside 2 busy loops
#   RUNS=3 BUSY=2 bash scripts/test_soak.sh -- --all    # arguments after -- go to scripts/test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-5}"
BUSY="${BUSY:-2}"
[ "${1:-}" = "--" ] && shift
case "$RUNS$BUSY" in *[!0-9]*) echo "test_soak.sh: RUNS and BUSY must be whole numbers (got RUNS=$RUNS BUSY=$BUSY)" >&2; exit 2 ;; esac

WORK="$(mktemp -d /tmp/rog-soak.XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

git clone -q --no-hardlinks "$ROOT" "$WORK/clone"
echo "soak: fresh clone of $(git -C "$ROOT" rev-parse --short HEAD) in $WORK/clone; $RUNS runs beside $BUSY busy loops"
for _ in $(seq 1 "$BUSY"); do
    python3 -c 'while 1: pass' &
    PIDS+=("$!")
done

green=0
for k in $(seq 1 "$RUNS"); do
    start=$(date +%s)
    set +e
    (cd "$WORK/clone" && bash scripts/test.sh "$@") > "$WORK/run-$k.log" 2>&1
    rc=$?
    set -e
    last="$(grep -E '(passed|failed)' "$WORK/run-$k.log" | tail -n 1)"
    echo "run $k: exit $rc in $(( $(date +%s) - start )) s: $last"
    if [ "$rc" -eq 0 ]; then
        green=$((green + 1))
    else
        grep -E '^(FAILED|ERROR) ' "$WORK/run-$k.log" | head -n 20 || true
        cp "$WORK/run-$k.log" "$ROOT/result/soak-run-$k.log" 2>/dev/null && echo "  log kept: result/soak-run-$k.log"
    fi
done
echo "soak: $green of $RUNS green ($BUSY busy loops)"
[ "$green" -eq "$RUNS" ]
