#!/usr/bin/env bash
# Run the test suite: creates or reuses .venv, installs the package with its test dependencies,
# then runs pytest. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh                  # the default tier (every test not marked slow or faults)
#   bash scripts/test.sh --all            # every tier in turn: default, then slow, then faults (what CI runs)
#   bash scripts/test.sh -m slow          # the slow tier alone (long end-to-end runs); replaces the default set
#   bash scripts/test.sh -m faults        # the fault scenarios over real processes alone
#   bash scripts/test.sh -m bench         # wall-clock accuracy checks (not a CI tier: run them on a quiet machine)
#   bash scripts/test.sh tests/test_rows.py -q
# Tests marked gpu skip with "needs a CUDA device" where torch sees none; under CI (CI=true) any other
# skip fails the run, naming what is missing (tests/ci_policy.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROG_EXTRAS=test,analysis,deploy bash "$ROOT/scripts/setup_env.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE set (some sandboxes and CI images set it), every one of the
# suite's few hundred interpreters recompiled rog/ from source and every pytest worker re-ran the assertion
# rewriting of all test files (collection 15.6 s instead of 6.6 s per worker, docs/testing.md)
unset PYTHONDONTWRITEBYTECODE
VPY="${ROG_VENV:-$ROOT/.venv}/bin/python"

# Both cores: pytest-xdist with ROG_TEST_WORKERS processes (0 runs in this process) for the default tier alone and
# for --all; tests that touch the host's network state share one worker, and so do the users of the shared loopback
# runs (tests/conftest.py).  Default: 3 workers on this 2-core machine (the default tier's subprocess starts and paced,
# shaped runs leave CPU idle: 339 s with 3 against 407 s with 2, same tree, back to back; docs/testing.md), 3 in the
# slow tier too.
WORKERS="${ROG_TEST_WORKERS:-3}"
case "$WORKERS" in *[!0-9]*|"") echo "test.sh: ROG_TEST_WORKERS must be a whole number (got '$WORKERS')" >&2; exit 2 ;; esac
XDIST=()
[ "$WORKERS" != "0" ] && XDIST=(-n "$WORKERS")
if [ "${1:-}" != "--all" ]; then
    [ $# -eq 0 ] && exec "$VPY" -m pytest "${XDIST[@]}" ${XDIST:+--dist loadgroup}
    exec "$VPY" -m pytest "$@"
fi
shift
for a in "$@"; do
    case "$a" in
        -m|-m*) echo "test.sh: --all runs the default, slow and faults tiers itself; drop $a (or run one tier with -m)" >&2; exit 2 ;;
    esac
done
# each tier's JUnit report (with every test's duration) is kept here; each tier ends with its 20 slowest tests
REPORTS="${ROG_TEST_REPORTS:-$ROOT/result/test-reports}"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
TIER_NAMES=(default slow faults)
# the fault scenarios carry both markers (-m slow alone runs them too); --all runs them once, in the faults tier;
# bench (wall-clock accuracy) is no tier of --all
# the property tests run in the default tier with a quarter of their examples and again in slow with all of them
TIER_MARKS=("not slow and not faults and not bench" "(slow or property) and not faults and not bench" "faults and not bench")
# a per-test limit (pytest-timeout): pyproject's 300 s in the default tier; the long end-to-end runs get 1800 s
TIER_TIMEOUTS=(300 1800 1800)
# workers per tier (ROG_TEST_WORKERS, when set, for every tier)
TIER_WORKERS=(3 3 2)
[ -n "${ROG_TEST_WORKERS:-}" ] && TIER_WORKERS=("$WORKERS" "$WORKERS" "$WORKERS")
# how xdist shares a tier out: the default tier keeps the host-network tests on one worker (loadgroup); the slow and
# faults tiers hand out whole files (loadfile: their emulated runs take random namespace prefixes, and the few fixed
# names in a file stay within that file)
TIER_DIST=(loadgroup loadfile loadfile)
for i in 0 1 2; do
    name="${TIER_NAMES[$i]}"
    echo "=== tier $name: pytest -m '${TIER_MARKS[$i]}'"
    start=$(date +%s)
    set +e
    full=0; [ "$name" = "slow" ] && full=1
    XDIST=()
    [ "${TIER_WORKERS[$i]}" != "0" ] && XDIST=(-n "${TIER_WORKERS[$i]}" --dist "${TIER_DIST[$i]}")
    # loadfile: the files in collection order (the longest first, tests/conftest.py), not by their number of tests
    [ "${TIER_DIST[$i]}" = "loadfile" ] && XDIST+=(--no-loadscope-reorder)
    ROG_HYPOTHESIS_FULL=$full "$VPY" -m pytest -m "${TIER_MARKS[$i]}" --timeout "${TIER_TIMEOUTS[$i]}" \
        ${XDIST[@]+"${XDIST[@]}"} --durations=20 \
        --junitxml="$REPORTS/$i-$name.xml" "$@"
    rc=$?
    set -e
    echo "$rc $(( $(date +%s) - start ))" > "$REPORTS/$i-$name.rc"
done
echo "JUnit reports (every test's duration): $REPORTS"
exec "$VPY" "$ROOT/utils/tier_report.py" "$REPORTS"
