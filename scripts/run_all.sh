#!/usr/bin/env bash
# The main job: reproduce the ROG paper's evaluation (emulated five-device testbed by default).
#
# Status: the engine, the deadline transport, the parameter-server/worker processes, the emulated
# testbed with tc trace replay (scripts/run.py --testbed emulated), power/energy, analysis and figures
# exist; the evaluation items (systems x thresholds x batch sizes x worker counts, resume, checkpoint
# testing, summary.json/summary.md) are not wired together here yet. Until they are, this script sets up
# the environment, runs the engine benchmark, and says plainly what it cannot do yet. It never
# fabricates results.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROG_EXTRAS=analysis,deploy bash "$ROOT/scripts/setup_env.sh"
PY="${ROG_VENV:-$ROOT/.venv}/bin/python"
echo "== engine benchmark (scripts/bench_engine.py) =="
"$PY" scripts/bench_engine.py
cat <<'MSG'

== not yet available ==
- the paper's evaluation items driven from here, with resume          -> issues 5 and 6
- deployment to real devices (run.py --testbed hosts, Fabric)         -> issue 5
- result/summary.{json,md} and figure/ from a full evaluation         -> issue 6
What you can run today (one experiment each; figures from scripts/plot.py):
  .venv/bin/python scripts/run.py --testbed emulated --library ROG -c outdoors --iterations 300
  .venv/bin/python scripts/run.py --testbed loopback --library BSP --iterations 300
No figures were drawn and nothing was written to result/ by this script.
MSG
exit 3
