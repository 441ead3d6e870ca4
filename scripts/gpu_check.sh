#!/usr/bin/env bash
# The GPU acceptance checks of docs/gpu.md ("Measuring on a GPU machine"), on a CUDA machine, in two parts
# that each fit one 10-minute command:
#   bash scripts/gpu_check.sh LOG_DIR codec      # bench_gpu.py (ConvMLP-M) + pytest -m gpu   (about 4-6 min)
#   bash scripts/gpu_check.sh LOG_DIR emulated   # run_gpu_emulated.py, cuda and cpu workers (about 6-8 min)
#   bash scripts/gpu_check.sh LOG_DIR            # both
# Logs (a few files, no folders) go to LOG_DIR; run folders to /tmp/rog_gpu_check.  Uses python3 (or
# $PYTHON) as it is: a bare GPU image with torch.  Optional, from the repository root: .whl/ (wheels the
# image lacks, e.g. simpy and fabric's stack, installed into /tmp/site) and .debs/ (Debian 12 .deb files of
# iproute2 libmnl0 libxtables12 libbpf1 libelf1 libcap2, for a host without ip/tc).
set -uo pipefail
LOG="${1:?usage: gpu_check.sh LOG_DIR [codec|emulated|all]}"
PART="${2:-all}"
PY="${PYTHON:-python3}"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
DEBS=()
if [ -d .debs ]; then DEBS=(--iproute2-debs .debs); fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uptime; } 2>&1 | tee "$LOG/machine.txt"
rc=0
if [ "$PART" = codec ] || [ "$PART" = all ]; then
    "$PY" scripts/bench_gpu.py 2>&1 | tee "$LOG/bench_gpu.log" || rc=1
    "$PY" -m pytest -m gpu tests/test_gpu.py tests/test_topk_device_codec.py tests/test_device_fused.py -q \
        -p no:cacheprovider 2>&1 | tee "$LOG/pytest_gpu.log" | tail -5 || rc=1
fi
if [ "$PART" = emulated ] || [ "$PART" = all ]; then
    "$PY" scripts/run_gpu_emulated.py --devices cuda,cpu --budget-s 20 "${DEBS[@]}" \
        --result-dir /tmp/rog_gpu_check --cache-dir /tmp/rog_gpu_check/.cache 2>&1 | tee "$LOG/emulated.log" || rc=1
fi
exit $rc
