"""Reference numbers the summaries and benchmarks quote, each with its source.

Two sources only, both public:

* **the paper**: Guo et al., "ROG: A High Performance and Robust Distributed Training System for
  Robotic IoT", MICRO 2022 (CRUDA workload, outdoors unless noted): the ranges below are its
  evaluation's claims;
* **the artifact**: the paper's public code and logs (github.com/hku-systems/ROG), its ``result/``
  logs of the outdoor runs (one Jetson Xavier NX worker of 4 workers + PS; initial accuracy
  52.88 %), and its engine functions timed on this project's 2-core x86 machine class (CPU, one
  thread, ConvMLP-M, 4 workers, threshold 4).
"""

from __future__ import annotations

PAPER = "Guo et al., ROG, MICRO 2022 (CRUDA, outdoors)"
ARTIFACT_LOGS = "hku-systems/ROG artifact, result/ logs of the outdoor runs (one Jetson worker of 4 + PS)"
ARTIFACT_ENGINE_SOURCE = ("hku-systems/ROG artifact engine functions timed on a 2-core x86 machine "
                          "(CPU, one thread, ConvMLP-M, 4 workers, threshold 4)")

# Per system label: seconds per iteration and its composition, accuracy % at 30 / 60 min, seconds
# and kJ to 64 % accuracy (None: the logs do not show it).  Source: ARTIFACT_LOGS.
ARTIFACT: dict[str, dict[str, float | None]] = {
    "BSP": dict(iter_s=14.75, compute_s=1.11, comm_s=5.14, stall_s=7.41, acc_30min=57.20, acc_60min=60.80,
                ttt_s=5400, energy_kj=None),
    "SSP-4": dict(iter_s=13.11, compute_s=1.11, comm_s=5.11, stall_s=5.74, acc_30min=58.80, acc_60min=61.17,
                  ttt_s=4500, energy_kj=21.9),
    "SSP-20": dict(iter_s=9.82, compute_s=1.12, comm_s=4.24, stall_s=3.32, acc_30min=59.23, acc_60min=63.76,
                   ttt_s=4140, energy_kj=18.8),
    "ROG-4": dict(iter_s=8.03, compute_s=1.14, comm_s=4.26, stall_s=2.63, acc_30min=60.54, acc_60min=65.07,
                  ttt_s=3241, energy_kj=19.6),
    "ROG-20": dict(iter_s=5.48, compute_s=1.15, comm_s=3.38, stall_s=0.93, acc_30min=64.01, acc_60min=67.30,
                   ttt_s=1801, energy_kj=11.7),
    "ROG-30": dict(iter_s=None, compute_s=None, comm_s=None, stall_s=0.34, acc_30min=66.88, acc_60min=68.94,
                   ttt_s=1080, energy_kj=None),
    "ROG-40": dict(iter_s=4.79, compute_s=1.12, comm_s=3.37, stall_s=0.30, acc_30min=67.53, acc_60min=69.72,
                   ttt_s=960, energy_kj=6.5),
}

# The paper's claims as ratio ranges ROG / baseline.  Source: PAPER.
STALL_CUT = (1 - 0.865, 1 - 0.491)  # stall time cut by 49.1-86.5 % outdoors
THROUGHPUT = (1 / 1.804, 1 / 1.252)  # throughput 25.2-80.4 % higher -> iteration-time ratio range
ENERGY_CUT = (1 - 0.507, 1 - 0.204)  # 20.4-50.7 % less energy to 64.0 % accuracy

# The artifact's engine on this machine class (min, median seconds; bytes).  Source: ARTIFACT_ENGINE_SOURCE.
ARTIFACT_ENGINE: dict[str, object] = {
    "push_prepare_s": [0.174, 0.286],  # compress, rank, build the payload
    "pull_apply_s": [0.113, 0.119],
    "ps_pull_prepare_s": [0.19, 0.41],  # before send, plus 0.19 s after
    "full_push_bytes": 2157607,
    "sign_bits_bytes": 2118601,
    "source": ARTIFACT_ENGINE_SOURCE,
}


def reference_sources_line() -> str:
    """summary.md's line naming the sources of the claims table's reference columns."""
    return (f"Reference columns: 'paper' = {PAPER}; 'artifact' = {ARTIFACT_LOGS}; 'acceptance' = this reproduction's "
            "bounds (docs/reproduction.md).")
