#!/usr/bin/env bash
# Run the test suite: creates or reuses .venv, installs the package with its test dependencies,
# then runs pytest. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m slow          # the slow end-to-end tests only
#   bash scripts/test.sh -m "slow or not slow"   # everything
#   bash scripts/test.sh tests/test_rows.py -q
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROG_EXTRAS=test,analysis,deploy bash "$ROOT/scripts/setup_env.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "${ROG_VENV:-$ROOT/.venv}/bin/python" -m pytest "$@"
