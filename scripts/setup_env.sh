#!/usr/bin/env bash
# Create or reuse the project's virtual environment (.venv) and install the package into it.
# Sourced by scripts/test.sh and scripts/run_all.sh; safe to run again (it skips work already done).
#   ROG_VENV=path    use another venv location
#   ROG_EXTRAS=test  optional-dependency groups to install beside `toolkit` (comma-separated)
# The toolkit extra (scipy, scikit-learn, h5py, PyYAML, tqdm) is always installed: the experiments need it; a robot
# that only trains with rog.optim can take the core install (`pip install .`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROG_VENV:-$ROOT/.venv}"
EXTRAS="toolkit${ROG_EXTRAS:+,$ROG_EXTRAS}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# PyTorch.  x86-64: torch==2.13.0 pinned (an unpinned 'torch' pulls a newer multi-GB CUDA build); with an
# NVIDIA driver (nvidia-smi or /proc/driver/nvidia) from the default index (on Linux the CUDA build), without
# one the CPU build from PyTorch's CPU wheel index (ROG_TORCH_CPU_INDEX), or from the default index when that
# cannot be reached within ROG_TORCH_INDEX_TIMEOUT_S (default 5 s).  Elsewhere (Jetson/arm64) what the platform
# index offers.  Either way it says which build it got.
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    TORCH_SPEC="torch"
    INDEX_ARGS=()
    FROM="the default index"
    if [ "$(uname -m)" = x86_64 ]; then
        TORCH_SPEC="torch==2.13.0"
        if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; then
            FROM="the default index (an NVIDIA driver is present)"
        else
            CPU_INDEX="${ROG_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
            if WHY="$("$VPY" - "$CPU_INDEX/torch/" "${ROG_TORCH_INDEX_TIMEOUT_S:-5}" <<'PYEOF' 2>&1
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).close()
except Exception as e:  # any failure: the index cannot be used
    print(f"{type(e).__name__}: {e}"[:160]); sys.exit(1)
PYEOF
)"; then
                INDEX_ARGS=(--index-url "$CPU_INDEX")
                FROM="PyTorch's CPU index $CPU_INDEX (no NVIDIA driver)"
            else
                FROM="the default index: PyTorch's CPU index $CPU_INDEX cannot be reached ($WHY)"
            fi
        fi
    fi
    echo "[setup] installing $TORCH_SPEC from $FROM"
    "$VPY" -m pip install -q ${INDEX_ARGS[@]+"${INDEX_ARGS[@]}"} "$TORCH_SPEC"
    "$VPY" -W ignore -c "import torch; print('[setup] got torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU build)')"
fi

# The package itself (editable), re-installed only when pyproject.toml or the extras change.
STAMP="$VENV/.rog-install-stamp"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    SPEC="$ROOT[$EXTRAS]"
    echo "[setup] installing rog[$EXTRAS] into $VENV"
    "$VPY" -m pip install -q -e "$SPEC"
    echo "$WANT" > "$STAMP"
fi
