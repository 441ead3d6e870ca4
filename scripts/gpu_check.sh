#!/usr/bin/env bash
# The GPU acceptance checks of docs/gpu.md ("Measuring on a GPU machine"), on a CUDA machine:
#   bash scripts/gpu_check.sh LOG_DIR codec      # bench_gpu.py --profile (ConvMLP-M) + pytest -m gpu
#   bash scripts/gpu_check.sh LOG_DIR emulated   # run_gpu_emulated.py: cuda (local, fabric), then cpu workers
#   bash scripts/gpu_check.sh LOG_DIR intradp    # Intra-DP with the CUDA server (about 150-160 s): per-unit server
#                                                # times on the GPU, then a reduced Table 6 (docs/intradp.md)
#   bash scripts/gpu_check.sh LOG_DIR            # all three, in that order (about 11-13 min on an H100 host)
# With GPU_CHECK_DEADLINE_S=N (seconds from start) a part that would not finish in time is skipped and says so,
# so one time-limited call returns every log it made.  Logs (a few files, no folders) go to LOG_DIR; run
# folders to /tmp/rog_gpu_check.  Uses python3 (or $PYTHON) as it is: a bare GPU image with torch.
# Optional, from the repository root: .whl/ (wheels the image lacks, e.g. simpy and fabric's stack, installed
# into /tmp/site) and .debs/ (Debian 12 .deb files of iproute2 libmnl0 libxtables12 libbpf1 libelf1 libcap2,
# for a host without ip/tc; with openssh-server, openssh-client and their libraries also the Fabric
# launcher's sshd, whose privilege-separation user is created here when missing, as the package would).
set -uo pipefail
LOG="${1:?usage: gpu_check.sh LOG_DIR [codec|emulated|intradp|all]}"
PART="${2:-all}"
PY="${PYTHON:-python3}"
DEADLINE_S="${GPU_CHECK_DEADLINE_S:-0}"
T0=$(date +%s)
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
# a bare GPU image installs nothing: the plain-file commands below (scripts/*.py) import rog, benchmarks and
# data_gen from this checkout (the folder this runs in)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
DEBS=()
if [ -d .debs ]; then DEBS=(--iproute2-debs .debs); fi
if [ -d .debs ] && ls .debs/openssh-server_*.deb >/dev/null 2>&1 && ! getent passwd sshd >/dev/null; then
    # sshd refuses to start without its privilege-separation user; openssh-server's postinst makes the same one
    useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd \
        && echo "gpu_check: created the system user sshd (openssh-server's privilege-separation user)"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uptime; } 2>&1 | tee "$LOG/machine.txt"

# time_for NAME SECONDS: true when the deadline (if any) leaves SECONDS for part NAME, else says it is skipped
time_for() {
    local left
    if [ "$DEADLINE_S" -le 0 ]; then return 0; fi
    left=$((DEADLINE_S - ($(date +%s) - T0)))
    if [ "$left" -ge "$2" ]; then return 0; fi
    echo "gpu_check: $1 skipped: ${left} s left before the deadline, it needs about $2 s" | tee -a "$LOG/skipped.txt"
    return 1
}
emulated() {  # emulated DEVICE LAUNCHERS LOGNAME
    "$PY" scripts/run_gpu_emulated.py --devices "$1" --launchers "$2" --budget-s 20 "${DEBS[@]}" \
        --result-dir /tmp/rog_gpu_check --cache-dir /tmp/rog_gpu_check/.cache 2>&1 | tee "$LOG/$3"
}
# intradp: (a) python -m rog.inference.profiler for VGG19 and DenseNet with the server on the GPU (the robot on
# this CPU): LOG/intradp_profile_<model>.json; (b) Table 6 reduced to one fresh trace seed ($INTRADP_SEED, default
# 104) per environment, every planner (Intra-DP one-segment and per-layer side by side) for $INTRADP_DURATION_S
# (default 8 s = 16 frames at 0.5 s) each, with those profiles (--times) and the server on the GPU; the two
# environments of a model run at the same time (two sessions, one GPU).  Logs LOG/intradp_trace_<model>_<env>.log,
# results LOG/intradp_result_<model>_<env>.json, the table LOG/intradp_table6.md (JSON on its last line).
# Without CUDA the profiler says so and the runs use the paced CPU server (marked cpu-paced in the table).
intradp() {
    local d="${INTRADP_DURATION_S:-8}" seed="${INTRADP_SEED:-104}" r=/tmp/rog_gpu_check/intradp_run m env out
    local planners=local,all,layer-latency,layer-energy-deadline,intra-dp,intra-dp-loss rc_i=0 pids
    rm -rf "$r" && mkdir -p "$r/intradp/traces"
    if [ ${#DEBS[@]} -gt 0 ] && ! { command -v ip && command -v tc; } >/dev/null 2>&1; then  # as run_gpu_emulated.py
        eval "$("$PY" -c 'import shlex; from pathlib import Path; from rog.experiment.gpu_emulated import choose_iproute2
t = choose_iproute2(".debs", Path("/tmp/rog_gpu_check/iproute2"))
print("export PATH=" + shlex.quote(":".join(t.path_dirs)) + ":\"$PATH\"")
print("export LD_LIBRARY_PATH=" + shlex.quote(":".join(t.lib_dirs)) + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")')" \
            || { echo "gpu_check intradp: cannot unpack .debs for ip/tc" | tee -a "$LOG/intradp.log"; return 1; }
    fi
    "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
        || echo "gpu_check intradp: NO CUDA device: the server runs on this CPU, paced (marked cpu-paced)" | tee -a "$LOG/intradp.log"
    for m in vgg19 densenet; do
        "$PY" -m rog.inference.profiler --model "$m" --server-device cuda --repeats 5 --out "$LOG/intradp_profile_$m.json" \
            2>&1 | tee -a "$LOG/intradp.log" || return 1
    done
    for env in indoors outdoors; do
        "$PY" -m data_gen.synth_traces --kind "$env" --seconds 120 --seed "$seed" \
            --out "$r/intradp/traces/synth-$env-seed$seed.csv" >>"$LOG/intradp.log" 2>&1 || return 1
    done
    for m in vgg19 densenet; do
        pids=()
        for env in indoors outdoors; do
            out="$r/intradp/trace-$m-synth-$env-seed$seed-passive"
            "$PY" -m rog.inference.experiment trace --model "$m" --trace "$r/intradp/traces/synth-$env-seed$seed.csv" \
                --times "$LOG/intradp_profile_$m.json" --planners "$planners" --duration-s "$d" --out "$out" \
                >"$LOG/intradp_trace_${m}_$env.log" 2>&1 &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || rc_i=1; done
        for env in indoors outdoors; do
            cp "$r/intradp/trace-$m-synth-$env-seed$seed-passive/result.json" "$LOG/intradp_result_${m}_$env.json" 2>/dev/null || rc_i=1
        done
    done
    "$PY" scripts/intradp_gpu_report.py --profiles "$LOG"/intradp_profile_vgg19.json "$LOG"/intradp_profile_densenet.json \
        --result-dir "$r" 2>&1 | tee "$LOG/intradp_table6.md" || rc_i=1
    return $rc_i
}
rc=0
if [ "$PART" = codec ] || [ "$PART" = all ]; then
    if time_for bench_gpu 60; then "$PY" scripts/bench_gpu.py --profile 2>&1 | tee "$LOG/bench_gpu.log" || rc=1; fi
    if time_for "pytest -m gpu" 90; then
        "$PY" -m pytest -m gpu tests/test_gpu.py tests/test_topk_device_codec.py tests/test_device_fused.py tests/test_device_kernels.py \
            tests/test_ci_policy.py -q -p no:cacheprovider 2>&1 | tee "$LOG/pytest_gpu.log" | tail -5 || rc=1
    fi
fi
if [ "$PART" = emulated ] || [ "$PART" = all ]; then
    if time_for "emulated cuda local+fabric" 200; then emulated cuda local,fabric emulated_cuda.log || rc=1; fi
    if time_for "emulated cpu local" 100; then emulated cpu local emulated_cpu_local.log || rc=1; fi
    if time_for "emulated cpu fabric" 100; then emulated cpu fabric emulated_cpu_fabric.log || rc=1; fi
fi
if [ "$PART" = intradp ] || [ "$PART" = all ]; then  # last: the other parts' numbers do not wait on it
    if time_for "intradp (profiles + reduced Table 6)" 160; then intradp || rc=1; fi
fi
echo "gpu_check: done in $(($(date +%s) - T0)) s, exit $rc" | tee -a "$LOG/machine.txt"
exit $rc
