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

# PyTorch: on x86-64 pin the CPU build (an unpinned 'torch' pulls a multi-GB CUDA build);
# elsewhere (Jetson/arm64) take what the platform index offers.
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    case "$(uname -m)" in
        x86_64) TORCH_SPEC="torch==2.13.0" ;;
        *) TORCH_SPEC="torch" ;;
    esac
    echo "[setup] installing $TORCH_SPEC"
    "$VPY" -m pip install -q "$TORCH_SPEC"
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
