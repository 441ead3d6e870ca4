#!/usr/bin/env bash
# The main job: reproduce the ROG paper's evaluation items on the emulated testbed, test the
# checkpoints, write result/summary.{json,md} and draw figure/.  A thin wrapper: it sets up the
# environment (extras analysis,deploy) and hands every argument to scripts/run_items.py.
#   bash scripts/run_all.sh                      # the default items, quick workload (~55 min here: --dry-run)
#   bash scripts/run_all.sh --help               # every item, default and opt-in, with its runs and duration
#   bash scripts/run_all.sh --workload quick outdoors
#   bash scripts/run_all.sh --dry-run            # the plan and its estimated duration
#   bash scripts/run_all.sh --traces DIR --seeds 0,1,2 outdoors   # every trace x seed (docs/robustness.md)
#   bash scripts/run_all.sh --allow-loopback     # without root / namespaces: loopback runs (else it refuses, exit 2)
#   bash scripts/run_all.sh --hosts configs/hosts.yaml            # on real devices over Fabric (docs/real_devices.md)
# Ctrl-C stops the current run (marked INCOMPLETE, namespaces and tc restored); run the same
# command again to finish only what is missing.  See `bash scripts/run_all.sh --help`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROG_EXTRAS=analysis,deploy,sim bash "$ROOT/scripts/setup_env.sh"  # sim: simpy, for the simulate item
PY="${ROG_VENV:-$ROOT/.venv}/bin/python"
exec "$PY" "$ROOT/scripts/run_items.py" "$@"
