"""What each worker link replays, and the quick regime (docs/design.md#quick-regime).

Trace per ``-c/--control`` (:func:`default_trace`): the full record
``<data dir>/bw_records/<control>.txt`` when ``utils/download_data.sh`` fetched it (data dir =
``$ROG_DATA_DIR`` or ``data/``; raw record rates, the artifact replayed workers at 0.7x), else the
synthetic ``configs/traces/<control>-synth.csv`` shipped with the repository.  Nothing outside the
repository (or the data dir) is read, so a fresh clone and a developer's tree run the same
experiment; the run's config records which source it used (:data:`rog.traces.TRACE_SOURCES`).

Every worker replays the same trace from its own start offset (the original replayed one record
from different offsets): by default evenly spread, worker ``k`` (event rank, from 0) from
``k * duration / n`` trace seconds.

The regime (:func:`regime`): what makes the paper's result is two ratios, not absolute sizes.
In the paper's testbed compute is about 1.12 s per iteration, the 1-bit payload about 2.09 MiB each
way and the replayed mean about 50 Mbit/s: transfer time at the mean rate is about 0.3 of compute
time, and a bandwidth sample (about 0.55 s) lasts about half an iteration.  The quick run keeps
both: trace time is scaled by ``compute_s / 1.12`` (the sample keeps lasting half an iteration) and
rates by whatever makes ``payload_bits / (mean rate) = ratio * compute_s`` (default ratio 0.3).
A user's ``--time-scale`` / ``--rate-scale`` replaces the derived value; the ratios actually
reached are recorded either way.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rog.errors import ConfigError
from rog.paths import repo_root
from rog.testbed.replay import ReplayOptions
from rog.traces import TRACE_SOURCES, Trace, apply_replay_mode, load_trace
from .run_config import RunConfig

__all__ = ["CONTROLS", "TRACE_SOURCES", "PAPER", "DEFAULT_REGIME_RATIO", "default_trace", "sha256_file", "default_offsets",
           "parse_offsets", "full_push_bytes", "regime", "replay_options", "load_for_replay"]

CONTROLS = ("outdoors", "indoors", "none")
REPO = repo_root()
DEFAULT_REGIME_RATIO = 0.3  # transfer time at the mean rate / compute time, per direction (docs/design.md#quick-regime)
# The paper's testbed (docs/design.md#quick-regime; rog/papers/rog/references.py): compute per iteration incl. compression, 1-bit payload per
# direction, replayed mean rate, record sample interval.
PAPER = {"compute_s": 1.12, "payload_mib": 2.09, "mean_mbit": 50.0, "sample_interval_s": 0.55}
PAPER["transfer_over_compute"] = PAPER["payload_mib"] * 8 * 1.048576 / PAPER["mean_mbit"] / PAPER["compute_s"]
PAPER["sample_over_compute"] = PAPER["sample_interval_s"] / PAPER["compute_s"]


def data_dir() -> Path:
    """Where ``utils/download_data.sh`` puts data: ``$ROG_DATA_DIR`` or ``data/`` in the repository."""
    return Path(os.environ.get("ROG_DATA_DIR") or REPO / "data")


def default_trace(control: str, root: Path = REPO, data: Path | None = None) -> tuple[Path, str]:
    """``(path, kind)`` of the default trace of ``control`` (``outdoors`` / ``indoors``); kind is
    ``record`` (the downloaded full record) or ``synthetic`` (``configs/traces/``)."""
    if control not in ("outdoors", "indoors"):
        raise ValueError(f"control must be 'outdoors' or 'indoors' to pick a trace, got {control!r}")
    data = data_dir() if data is None else Path(data)
    candidates = [(data / "bw_records" / f"{control}.txt", "record"),
                  (root / "configs" / "traces" / f"{control}-synth.csv", "synthetic")]
    for path, kind in candidates:
        if path.is_file():
            return path.resolve(), kind
    raise ValueError(f"no trace for control {control!r}: none of {[str(p) for p, _ in candidates]} exists; "
                     f"pass --trace FILE")


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_offsets(duration_s: float, n_workers: int) -> list[float]:
    """Evenly spread start offsets (trace seconds): worker ``k`` starts at ``k * duration_s / n``."""
    if not (isinstance(n_workers, int) and n_workers >= 1):
        raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
    return [k * float(duration_s) / n_workers for k in range(n_workers)]


def parse_offsets(text: str | None, n_workers: int, duration_s: float) -> list[float]:
    """``--worker-offsets``: None -> :func:`default_offsets`; else ``n_workers`` comma-separated
    seconds >= 0 (trace seconds, before time scaling)."""
    if text is None:
        return default_offsets(duration_s, n_workers)
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--worker-offsets must be comma-separated seconds, e.g. 0,120,240,360; got {text!r}") from None
    if len(vals) != n_workers:
        raise ValueError(f"--worker-offsets gives {len(vals)} offsets for {n_workers} workers; give one per worker")
    if any(not (v >= 0 and v < float("inf")) for v in vals):
        raise ValueError(f"--worker-offsets must be finite seconds >= 0, got {text!r}")
    return vals


def run_trace(a, control: str) -> tuple[Trace | None, dict | None, list[float] | None]:
    """The trace a run's flags replay (``--trace`` or ``-c``'s default), ``config.yaml``'s ``trace`` entry and the
    workers' start offsets; all None when unshaped.  A bad file or offset raises ConfigError naming the flag."""
    if control == "none":
        if a.worker_offsets is not None:
            raise ConfigError("--worker-offsets places each worker in a trace, but this run replays none "
                              "(-c none or --rate-mbit); drop it, or choose -c outdoors|indoors or --trace FILE")
        return None, None, None
    try:
        path, kind = (Path(a.trace).resolve(), "user") if a.trace else default_trace(control)
        trace = load_trace(path, fmt=getattr(a, "trace_format", None))
        offsets = parse_offsets(a.worker_offsets, a.workers, trace.duration_s)
    except ValueError as e:
        raise ConfigError(f"{'--trace' if a.trace else '-c/--control'}: {e}") from None
    except OSError as e:
        raise ConfigError(f"--trace: cannot read {a.trace or path}: {e.strerror}; give an existing "
                          "trace file (t_s,mbps CSV or 'seconds Mbps' records)") from None
    info = dict(path=str(path), kind=kind, sha256=sha256_file(path), duration_s=trace.duration_s,
                mean_mbit=trace.mean_mbit, samples=trace.n_samples, format=getattr(a, "trace_format", None) or "auto")
    return trace, info, offsets


def full_push_bytes(partition, codec, chunk_share: float | None = None) -> int:
    """Frame bytes of one push of every row (what BSP sends each way per iteration), by encoding zeros;
    in chunks of ``chunk_share`` of the payload (None: the engine's fixed default size)."""
    import numpy as np

    from rog.chunks import chunk_bytes_for_share, plan_chunks
    from rog.policies.base import all_rows_plan
    from rog.wire import encode_frame

    plan = all_rows_plan(partition)
    rwb = codec.row_wire_bytes(partition)
    cp = plan_chunks(partition, plan.order, plan.mandatory_rows, rwb, chunk_bytes_for_share(rwb, chunk_share))
    acc = np.zeros(partition.n_elements, dtype=np.float32)
    scales = codec.tensor_scales(partition, acc)
    return int(sum(len(encode_frame(codec.encode(partition, acc, scales, ch), codec, 1, i))
                   for i, ch in enumerate(cp.chunks)))


def regime(*, trace: Trace | None, compute_s: float | None, payload_bytes: int, wire_factor: float,
           replay_mode: str = "recorded", ratio: float | None = DEFAULT_REGIME_RATIO,
           time_scale: float | None = None, rate_scale: float | None = None, seed: int = 0) -> dict:
    """Resolve the time and rate scales and describe the regime reached (for config.yaml ``regime``).

    ``time_scale`` / ``rate_scale`` None = derived (see the module doc); given = the user's.
    Without a trace (unshaped) or without compute pacing nothing is derived (scales 1.0).  The
    mean rate is the trace's as the replay mode plays it (the artifact's holds weight held
    samples more), over one pass.
    """
    out: dict = {"paper": {k: round(v, 4) for k, v in PAPER.items()}, "target_transfer_over_compute": ratio}
    ts_src = "user" if time_scale is not None else "derived: compute_s / paper compute_s"
    rs_src = "user" if rate_scale is not None else f"derived: transfer/compute = {ratio}"
    if time_scale is None:
        time_scale = compute_s / PAPER["compute_s"] if (compute_s and trace is not None) else 1.0
        if not compute_s:
            ts_src = "default 1.0 (no compute pacing to scale to)"
    wire_bytes = payload_bytes * wire_factor
    played = apply_replay_mode(trace, replay_mode, seed, time_scale) if trace is not None else None
    mean = played.mean_mbit if played is not None else None
    if rate_scale is None:
        if trace is None or not compute_s or ratio is None:
            rate_scale = 1.0
            rs_src = "default 1.0 (" + ("unshaped" if trace is None else "no pacing or --regime-ratio none") + ")"
        else:
            rate_scale = wire_bytes * 8 / 1e6 / (ratio * compute_s) / mean
    out.update(time_scale=time_scale, time_scale_source=ts_src, rate_scale=rate_scale, rate_scale_source=rs_src,
               compute_s=compute_s, payload_bytes=int(payload_bytes), wire_bytes=round(wire_bytes, 1))
    if trace is not None:
        replay_mean = mean * rate_scale
        transfer_s = wire_bytes * 8 / 1e6 / replay_mean
        sample_s = float(played.stats()["mean_interval_s"])  # wall seconds a rate holds on average
        out.update(trace_mean_mbit=round(mean, 4), replayed_mean_mbit=round(replay_mean, 4),
                   transfer_s_at_mean=round(transfer_s, 5),
                   transfer_over_compute=round(transfer_s / compute_s, 4) if compute_s else None,
                   sample_interval_s=round(sample_s, 5),
                   sample_over_compute=round(sample_s / compute_s, 4) if compute_s else None)
    return out


def replay_options(cfg: RunConfig, worker: int) -> ReplayOptions:
    """The replay of event-rank ``worker``'s link from a resolved run config (loops until stopped)."""
    return ReplayOptions(time_scale=cfg.links.time_scale, rate_scale=cfg.links.rate_scale,
                         start_offset_s=cfg.links.worker_offsets_s[worker], loop=True,
                         replay_mode=cfg.links.replay_mode, seed=cfg.workload.seed)


def load_for_replay(cfg: RunConfig) -> Trace:
    """The run's trace (``cfg.links.trace['path']``), checked against the recorded checksum."""
    path = cfg.links.trace["path"]
    digest = sha256_file(path)
    if digest != cfg.links.trace["sha256"]:
        raise ValueError(f"trace {path} changed since the run was configured (sha256 {digest} != "
                         f"{cfg.links.trace['sha256']}); start the run again")
    return load_trace(path, fmt=cfg.links.trace.get("format"))
