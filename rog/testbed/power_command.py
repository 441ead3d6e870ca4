"""Sample one device's power at 10 Hz into a CSV (``t_s,power_w,source``) until SIGINT, SIGTERM or --duration-s.

Source: ``--source auto`` (default) takes the first usable sensor in the profile's preference
(``jtop`` on a Jetson, ``rapl``, ``nvml``), else the state-based model.  With the model nothing
can be read live (events are logged when they end), so on stop the sampler reads the rank's
event file (``--events``), draws the model's power on the 10 Hz grid of the sampled interval into
the CSV, and computes the energy from the timeline itself.  Every row and the summary name the
source: 'jtop', 'rapl', 'nvml' or 'model:<profile name>'.

On exit the last stdout line is one JSON object: the energy report (device, energy_j, mean_w,
source, is_model, t0_s, t1_s, ...), the CSV path and the row count.  ``t_s`` is seconds on the run's
clock: since ``--origin-monotonic-s``, else the event file's origin, else the sampler's start.

Examples::

    python -m rog.testbed.power_command --out result/run/power-w0.csv --profile jetson-xavier-nx
    python -m rog.testbed.power_command --out power.csv --profile quick-cpu \\
        --events result/run/events-w0.jsonl --duration-s 60

``scripts/power_sampler.py`` runs the same :func:`main`; the deployment starts it as
``python -m rog.testbed.power_command`` on every host (:mod:`rog.deploy.plan`).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from rog.power import (
    DEFAULT_PREFERENCE,
    CsvSampleWriter,
    PowerSourceUnavailable,
    detect_power_source,
    open_power_source,
    probe_power_sources,
    read_samples_csv,
    render_model_samples,
    report_from_samples,
    report_from_timeline,
    run_sampler,
    timeline_from_events,
    write_samples_csv,
)
from rog.power.sources import POWER_SOURCES, RAPL_ROOT
from rog.testbed.profiles import load_profile
from rog.testbed.signal_stop import stop_on_signals


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="power_sampler.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write (t_s,power_w,source)")
    p.add_argument("--source", default="auto", choices=("auto",) + tuple(POWER_SOURCES),
                   help="power source (default auto: the profile's preference, model last)")
    p.add_argument("--profile", default=None, help="device profile name or YAML path (needed for the model)")
    p.add_argument("--events", default=None, help="this rank's event file (events-<rank>.jsonl): the model's timeline")
    p.add_argument("--device", default=None, help="device label in the report (default: the event file's rank, "
                                                  "else the profile name)")
    p.add_argument("--duration-s", type=float, default=None, help="stop after this many seconds (default: on signal)")
    p.add_argument("--period-s", type=float, default=0.1, help="sampling period (default 0.1 s = 10 Hz)")
    p.add_argument("--origin-monotonic-s", type=float, default=None,
                   help="the run's clock origin (time.monotonic); default: the event file's, else the start")
    p.add_argument("--sysfs-root", default=RAPL_ROOT, help=f"powercap root for RAPL (default {RAPL_ROOT})")
    p.add_argument("--max-gap-s", type=float, default=1.0, help="longest gap between samples integrated (s)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Sample until stopped; the last stdout line is the energy report (exit 2: bad flags or no usable source)."""
    args = parse_args(argv)
    profile = load_profile(args.profile) if args.profile else None
    preference = profile.power_sensor if profile is not None else DEFAULT_PREFERENCE
    source = args.source
    if source == "auto":
        source = detect_power_source(preference, sysfs_root=args.sysfs_root)
    if source == "model" and profile is None and args.source == "model":
        print("power_sampler: --source model needs --profile NAME (the watts per state)", file=sys.stderr)
        return 2
    if source == "model" and profile is None:
        reasons = probe_power_sources(("jtop", "rapl", "nvml"), sysfs_root=args.sysfs_root)
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items() if v)
        print(f"power_sampler: no power sensor here ({why}); pass --profile NAME to use the state-based model",
              file=sys.stderr)
        return 2
    if args.events:  # imported only when needed: the runtime package pulls in the engine
        from rog.runtime.events import read_events
    origin = args.origin_monotonic_s
    if origin is None and args.events:
        header, _ = read_events(args.events, allow_partial_last_line=True)
        origin = float(header["origin_monotonic_s"])
    device = args.device or (_strip_prefix(Path(args.events).stem, "events-") if args.events else None) \
        or (profile.name if profile else "device")

    stop = threading.Event()
    stop_on_signals(stop, (signal.SIGINT, signal.SIGTERM))  # no lock taken in the handler (rog.testbed.signal_stop)

    if source == "model":
        print(f"power_sampler: no sensor used: energy from the state-based model, labelled {profile.model_source}",
              file=sys.stderr)
        with CsvSampleWriter(args.out):  # the header now, so a watcher sees the file; rows are drawn at stop
            pass
        t0, t1 = run_sampler(_Silent(), _NoRows(), stop, duration_s=args.duration_s, period_s=args.period_s,
                             origin_monotonic_s=origin)
        intervals = []
        if args.events:
            header, records = read_events(args.events, allow_partial_last_line=True)
            intervals = timeline_from_events(records, merge="priority" if header["rank"] == "ps" else "error")
        else:
            print("power_sampler: no --events: the model sees no state, so the whole interval is idle "
                  "(stall watts)", file=sys.stderr)
        write_samples_csv(args.out, render_model_samples(intervals, profile, t0, t1, args.period_s))
        report = report_from_timeline(device, intervals, profile, t0, t1)
    else:
        try:
            sensor = open_power_source(source, sysfs_root=args.sysfs_root, interval_s=args.period_s)
        except PowerSourceUnavailable as e:
            print(f"power_sampler: {source} is not usable here: {e}", file=sys.stderr)
            return 2
        with sensor, CsvSampleWriter(args.out) as writer:
            t0, t1 = run_sampler(sensor, writer, stop, duration_s=args.duration_s, period_s=args.period_s,
                                 origin_monotonic_s=origin)
        rows = read_samples_csv(args.out) if writer.rows else None
        if rows is None:
            print("power_sampler: stopped before the first sample; no energy", file=sys.stderr)
            print(json.dumps({"csv": str(args.out), "rows": 0, "source": source}))
            return 1
        t0, t1 = max(t0, float(rows.t_s[0])), float(rows.t_s[-1])
        report = report_from_samples(device, rows, t0, t1, max_gap_s=args.max_gap_s,
                                     note=_SENSOR_NOTES.get(source, ""))
    out = report.to_dict()
    out.update({"csv": str(args.out), "rows": _count_rows(args.out)})
    print(json.dumps(out))
    return 0


_SENSOR_NOTES = {
    "jtop": "measured: jetson-stats total board power",
    "rapl": "measured: RAPL CPU package domains only (not GPU, screen or Wi-Fi)",
    "nvml": "measured: NVML GPU board power only",
}


class _Silent:
    """The model's stand-in during the run: nothing to read live."""

    name = "model"

    def read_w(self):
        return None


class _NoRows:
    def write(self, *_):  # pragma: no cover - _Silent never yields a value
        raise AssertionError("the model writes its rows at stop")


def _strip_prefix(text: str, prefix: str) -> str:
    """``text`` without a leading ``prefix`` (``str.removeprefix`` is Python 3.9+; the robots run 3.8)."""
    return text[len(prefix):] if text.startswith(prefix) else text


def _count_rows(path) -> int:
    with open(path, encoding="utf-8") as f:
        return max(0, sum(1 for _ in f) - 1)


if __name__ == "__main__":
    sys.exit(main())
