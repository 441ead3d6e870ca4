"""Power and energy per device: live sensors at 10 Hz, or the state-based model, always labelled.

Sources (:mod:`rog.power.sources`): ``jtop`` (jetson-stats, whole Jetson board), ``rapl`` (Intel
RAPL, CPU package), ``nvml`` (NVIDIA GPU board); :func:`detect_power_source` picks the first one
usable here and otherwise answers ``model``.  The model (docs/design.md#energy-model) turns a device's state timeline
(compute / communication / stall, from its event log) into joules with its profile's watts per
state (:mod:`rog.testbed.profiles`; Table III on a Jetson Xavier NX), labelled
``model:<profile name>``.

Energy (:mod:`rog.power.energy`) is integrated over each device's real training interval:
:func:`integrate_energy_j` for samples, :func:`model_energy_j` for a timeline; an
:class:`EnergyReport` carries joules, mean watts, the interval and the source.
Sampling to CSV: :mod:`rog.power.sampler` and ``scripts/power_sampler.py``.
"""

from .energy import (
    EVENT_STATES,
    SENSOR_SOURCES,
    STATES,
    EnergyReport,
    PowerSamples,
    check_intervals,
    integrate_energy_j,
    merge_by_priority,
    model_energy_j,
    model_power_w,
    report_from_events,
    report_from_samples,
    report_from_timeline,
    state_durations_s,
    timeline_from_events,
)
from .sampler import CSV_FIELDS, PERIOD_S, CsvSampleWriter, read_samples_csv, render_model_samples, run_sampler, write_samples_csv
from .sources import (
    DEFAULT_PREFERENCE,
    POWER_SOURCES,
    JtopSource,
    NvmlSource,
    PowerSource,
    PowerSourceUnavailable,
    RaplSource,
    detect_power_source,
    open_power_source,
    probe_power_sources,
)

__all__ = [
    "EVENT_STATES", "SENSOR_SOURCES", "STATES", "EnergyReport", "PowerSamples", "check_intervals",
    "integrate_energy_j", "merge_by_priority", "model_energy_j", "model_power_w", "report_from_events",
    "report_from_samples", "report_from_timeline", "state_durations_s", "timeline_from_events",
    "CSV_FIELDS", "PERIOD_S", "CsvSampleWriter", "read_samples_csv", "render_model_samples", "run_sampler",
    "write_samples_csv", "DEFAULT_PREFERENCE", "POWER_SOURCES", "JtopSource", "NvmlSource", "PowerSource",
    "PowerSourceUnavailable", "RaplSource", "detect_power_source", "open_power_source", "probe_power_sources",
]
