"""Device profiles: what one device computes per iteration, with which batch, at which power.

A profile is a YAML file in ``configs/devices/<name>.yaml`` (every field carries a comment there).
It serves three consumers:

* compute pacing (docs/design.md#quick-regime): a worker sleeps the remainder of ``compute_s_per_iteration`` so
  four workers sharing two cores still behave like four robots (:meth:`DeviceProfile.pace_sleep_s`); an
  optional measured ``compute_fit`` (``a + c x batch``, :mod:`rog.testbed.compute_model`) makes a
  streamed pass of another batch size cost what the fit says (:meth:`DeviceProfile.pacer`);
* the workload: ``batch_size`` per device (Table II: 24 on a robot, 16 on a laptop);
* energy: the watts per state (Table III for the Jetson Xavier NX) used by the state-based power
  model (:mod:`rog.power`), and the preferred power sensor (``jtop``, ``rapl``, ``nvml``, ``model``).

Every number says where it comes from (``compute_basis``, ``power_basis``, each starting with
``measured:``, ``derived:`` or ``assumption:``), so a model-based energy can never pass for a
measured one.  Unknown or duplicated keys are errors; every error names the file, the field and
how to fix it.

:func:`scale_profile` makes the quick profile: it multiplies the compute time by one factor and
keeps every dimensionless ratio of the profile (watts per state are powers, not times, so they stay;
the batch size stays), and records the factor in ``scaled_from``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ..paths import repo_root
from ..strict_yaml import DuplicateKeyError, load_strict, yaml_problem
from .compute_model import BatchPacer, ComputeFit, parse_compute_fit

__all__ = [
    "DEVICE_CLASSES", "POWER_SENSORS", "POWER_STATES", "BASIS_PREFIXES", "DEVICES_DIR",
    "ProfileError", "PowerFigures", "ScaleRecord", "DeviceProfile",
    "load_profile", "profile_from_dict", "available_profiles", "scale_profile", "dump_profile",
]

DEVICE_CLASSES = ("robot", "laptop", "server")
POWER_SENSORS = ("jtop", "rapl", "nvml", "model")
POWER_STATES = ("compute", "communication", "stall")  # required watts; "idle" is optional
BASIS_PREFIXES = ("measured:", "derived:", "assumption:")
DEVICES_DIR = repo_root() / "configs" / "devices"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_TOP_FIELDS = ("name", "device_class", "compute_s_per_iteration", "compute_basis", "batch_size",
               "power_w", "power_basis", "power_sensor", "scaled_from", "compute_ratios", "compute_fit")
_OPTIONAL_TOP = ("scaled_from", "compute_ratios", "compute_fit")
_POWER_FIELDS = POWER_STATES + ("idle",)
_SCALE_FIELDS = ("profile", "compute_time_scale")


class ProfileError(ValueError):
    """A device profile is invalid; the message names the file (if any), the field and the fix."""


# ---------------------------------------------------------------------------------------------
# value objects


@dataclass(frozen=True)
class PowerFigures:
    """Whole-device watts per training state (Table III for the Jetson Xavier NX)."""

    compute_w: float  # computing gradients, local update, compression (compute-pacing sleep included)
    communication_w: float  # pushing or pulling rows
    stall_w: float  # waiting at the staleness gate or barrier
    idle_w: float | None = None  # any time no state covers (between logged events); None = stall_w

    def __post_init__(self) -> None:
        for name in ("compute_w", "communication_w", "stall_w", "idle_w"):
            v = getattr(self, name)
            if v is None and name == "idle_w":
                continue
            if not _is_number(v) or not v > 0:
                raise ValueError(f"power {name} must be a finite number of watts > 0, got {v!r}")

    def watts(self) -> dict[str, float]:
        """``{state: watts}`` for compute, communication, stall and idle (idle = stall unless set)."""
        return {
            "compute": float(self.compute_w),
            "communication": float(self.communication_w),
            "stall": float(self.stall_w),
            "idle": float(self.stall_w if self.idle_w is None else self.idle_w),
        }


@dataclass(frozen=True)
class ScaleRecord:
    """One scaling applied to a profile: which profile it started from and the compute-time factor.

    Only the compute time is multiplied.  To keep the paper's regime the caller scales the traces
    to match (docs/design.md#quick-regime): trace time by the same factor (a bandwidth sample keeps lasting the same
    share of an iteration) and rates so that transfer time over compute time is unchanged; energy of
    a run then scales by the same factor at equal watts (:meth:`implied`).
    """

    profile: str  # name of the profile scaled
    compute_time_scale: float  # new compute_s_per_iteration / old

    def __post_init__(self) -> None:
        if not isinstance(self.profile, str) or not self.profile:
            raise ValueError(f"scaled_from profile must be a non-empty profile name, got {self.profile!r}")
        if not _is_number(self.compute_time_scale) or not self.compute_time_scale > 0:
            raise ValueError(f"compute_time_scale must be a finite number > 0, got {self.compute_time_scale!r}")

    def implied(self) -> dict[str, float]:
        """The companion scales that keep the dimensionless ratios (for the run's provenance)."""
        k = float(self.compute_time_scale)
        return {"compute_time": k, "trace_time": k, "energy_per_run": k, "power": 1.0, "batch_size": 1.0}


@dataclass(frozen=True)
class DeviceProfile:
    """One device: compute pacing, batch size, watts per state and the power sensor to prefer."""

    name: str  # file stem in configs/devices/
    device_class: str  # robot | laptop | server
    compute_s_per_iteration: float  # compute time to pace to (compression included, as in the paper)
    compute_basis: str  # where that number comes from ("measured:", "derived:" or "assumption:")
    batch_size: int  # samples per iteration on this device
    power: PowerFigures  # watts per state
    power_basis: str  # where the watts come from ("measured:", "derived:" or "assumption:")
    power_sensor: tuple[str, ...] = ("model",)  # preference order; the model is the final fallback anyway
    scaled_from: tuple[ScaleRecord, ...] = ()  # every scaling applied, oldest first
    compute_ratios: tuple[float, ...] = ()  # a team paced by this profile: worker k's compute time multiple (() = all 1)
    compute_fit: ComputeFit | None = None  # measured a + c x batch (None: the constant at every batch)
    source_path: str | None = field(default=None, compare=False)  # file it was loaded from

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"name must be lowercase letters, digits, '.', '_' or '-', got {self.name!r}")
        if self.device_class not in DEVICE_CLASSES:
            raise ValueError(f"device_class must be one of {' | '.join(DEVICE_CLASSES)}, got {self.device_class!r}")
        if not _is_number(self.compute_s_per_iteration) or not self.compute_s_per_iteration > 0:
            raise ValueError(f"compute_s_per_iteration must be a finite number of seconds > 0, "
                             f"got {self.compute_s_per_iteration!r}")
        for name in ("compute_basis", "power_basis"):
            _check_basis(name, getattr(self, name))
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if not isinstance(self.power, PowerFigures):
            raise ValueError(f"power must be a PowerFigures, got {type(self.power).__name__}")
        object.__setattr__(self, "power_sensor", _check_sensors(self.power_sensor))
        if not all(isinstance(r, ScaleRecord) for r in self.scaled_from):
            raise ValueError("scaled_from must hold ScaleRecord entries")
        object.__setattr__(self, "scaled_from", tuple(self.scaled_from))
        object.__setattr__(self, "compute_ratios", _v_ratios(self.compute_ratios))
        if self.compute_fit is not None and not isinstance(self.compute_fit, ComputeFit):
            raise ValueError("compute_fit must be a ComputeFit (rog.testbed.compute_fit) or None")

    @property
    def model_source(self) -> str:
        """The label of energies computed from this profile's watts: ``model:<name>``."""
        return f"model:{self.name}"

    @property
    def power_is_assumption(self) -> bool:
        """True when the watts are an assumption, not a measurement."""
        return self.power_basis.startswith("assumption:")

    def watts(self) -> dict[str, float]:
        """``{state: watts}`` (see :meth:`PowerFigures.watts`)."""
        return self.power.watts()

    def pace_sleep_s(self, elapsed_s: float) -> float:
        """Seconds to sleep after ``elapsed_s`` of real compute to reach ``compute_s_per_iteration`` (>= 0)."""
        if not _is_number(elapsed_s) or elapsed_s < 0:
            raise ValueError(f"elapsed_s must be a finite number of seconds >= 0, got {elapsed_s!r}")
        return max(0.0, float(self.compute_s_per_iteration) - float(elapsed_s))

    def pacer(self, compute_s: float, anchor_samples: int) -> BatchPacer:
        """Pacing per pass: ``compute_s`` at ``anchor_samples``, scaled with the batch by ``compute_fit`` if any."""
        return BatchPacer(compute_s, anchor_samples, self.compute_fit)

    def to_dict(self) -> dict[str, Any]:
        """The profile as the mapping a YAML file holds (round-trips through :func:`profile_from_dict`)."""
        power = {"compute": self.power.compute_w, "communication": self.power.communication_w,
                 "stall": self.power.stall_w}
        if self.power.idle_w is not None:
            power["idle"] = self.power.idle_w
        out: dict[str, Any] = {
            "name": self.name,
            "device_class": self.device_class,
            "compute_s_per_iteration": self.compute_s_per_iteration,
            "compute_basis": self.compute_basis,
            "batch_size": self.batch_size,
            "power_w": power,
            "power_basis": self.power_basis,
            "power_sensor": list(self.power_sensor),
        }
        if self.scaled_from:
            out["scaled_from"] = [{"profile": r.profile, "compute_time_scale": r.compute_time_scale}
                                  for r in self.scaled_from]
        if self.compute_ratios:
            out["compute_ratios"] = list(self.compute_ratios)
        if self.compute_fit is not None:
            out["compute_fit"] = self.compute_fit.to_dict()
        return out


# ---------------------------------------------------------------------------------------------
# loading


def available_profiles(devices_dir: str | os.PathLike | None = None) -> list[str]:
    """Names of the profiles in ``devices_dir`` (default ``configs/devices``)."""
    d = Path(devices_dir) if devices_dir is not None else DEVICES_DIR
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_profile(path_or_name: str | os.PathLike, devices_dir: str | os.PathLike | None = None) -> DeviceProfile:
    """Load and validate a profile from a YAML path, or by name from ``configs/devices/<name>.yaml``."""
    if isinstance(path_or_name, DeviceProfile):
        return path_or_name
    text = os.fspath(path_or_name)
    looks_like_path = os.sep in text or "/" in text or text.endswith((".yaml", ".yml"))
    if looks_like_path:
        path = Path(text)
    else:
        d = Path(devices_dir) if devices_dir is not None else DEVICES_DIR
        path = d / f"{text}.yaml"
        if not path.is_file():
            known = available_profiles(d)
            hint = difflib.get_close_matches(text, known, n=1)
            raise ProfileError(
                f"no device profile named {text!r} in {d}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; available: {', '.join(known) or 'none'}; or pass a path to a .yaml file")
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"{path}: cannot read the device profile: {e.strerror}") from None
    try:
        data = load_strict(raw)
    except DuplicateKeyError as e:
        raise ProfileError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ProfileError(f"{path}: not valid YAML ({yaml_problem(e)}); check indentation and quoting") from None
    return profile_from_dict(data, source=str(path), expected_name=path.stem)


def profile_from_dict(data: Any, source: str | None = None, expected_name: str | None = None) -> DeviceProfile:
    """Validate a parsed profile mapping; every problem found is listed in one ProfileError."""
    where = f"{source}: " if source else ""
    if data is None:
        raise ProfileError(f"{where}empty device profile; it needs the fields {', '.join(_required_top())}")
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}a device profile must be a mapping of field: value, got {type(data).__name__}")
    errors: list[str] = []
    _check_keys(data, _TOP_FIELDS, "", errors)
    for key in _required_top():
        if key not in data:
            errors.append(f"field {key!r}: missing ({_HINTS[key]})")

    def take(key, check):
        if key not in data:
            return None
        try:
            return check(data[key])
        except ValueError as e:
            errors.append(f"field {key!r}: {e} ({_HINTS[key]})")
            return None

    name = take("name", _v_name)
    if name is not None and expected_name is not None and name != expected_name:
        errors.append(f"field 'name': {name!r} differs from the file name {expected_name!r}.yaml "
                      f"(rename the file or set name: {expected_name})")
    device_class = take("device_class", _v_class)
    compute_s = take("compute_s_per_iteration", _v_seconds)
    compute_basis = take("compute_basis", lambda v: _v_basis("compute_basis", v))
    batch_size = take("batch_size", _v_batch)
    power_basis = take("power_basis", lambda v: _v_basis("power_basis", v))
    sensors = take("power_sensor", _check_sensors)
    power = _v_power(data.get("power_w"), errors) if "power_w" in data else None
    scaled = _v_scaled(data.get("scaled_from"), errors) if "scaled_from" in data else ()
    ratios = take("compute_ratios", _v_ratios) if "compute_ratios" in data else ()
    fit = take("compute_fit", parse_compute_fit) if "compute_fit" in data else None

    if errors:
        raise ProfileError(f"{where}invalid device profile: " + "; ".join(errors))  # one line
    try:
        return DeviceProfile(name=name, device_class=device_class, compute_s_per_iteration=float(compute_s),
                             compute_basis=compute_basis, batch_size=batch_size, power=power,
                             power_basis=power_basis, power_sensor=sensors, scaled_from=scaled,
                             compute_ratios=ratios, compute_fit=fit, source_path=source)
    except ValueError as e:  # pragma: no cover - every field was checked above
        raise ProfileError(f"{where}{e}") from None


def dump_profile(profile: DeviceProfile) -> str:
    """YAML text of a profile (no comments; the files in configs/devices/ carry the comments)."""
    return yaml.safe_dump(profile.to_dict(), sort_keys=False)


# ---------------------------------------------------------------------------------------------
# scaling for the quick profile


def scale_profile(profile: DeviceProfile, compute_time_scale: float, name: str | None = None,
                  compute_basis: str | None = None, power_basis: str | None = None,
                  power_sensor: Iterable[str] | str | None = None) -> DeviceProfile:
    """``profile`` with its compute time multiplied by ``compute_time_scale``, recorded in ``scaled_from``.

    Watts per state and the batch size are kept (so the stall/compute and communication/compute
    power ratios, and the batch, are unchanged); apply the same factor to the traces' time axis
    (:meth:`ScaleRecord.implied`).  ``name`` defaults to ``<name>-x<factor>``; the descriptive
    fields (bases, sensor preference) may be replaced, no number can.
    """
    if not isinstance(profile, DeviceProfile):
        raise ValueError(f"profile must be a DeviceProfile (use load_profile), got {type(profile).__name__}")
    if not _is_number(compute_time_scale) or not compute_time_scale > 0:
        raise ValueError(f"compute_time_scale must be a finite number > 0, got {compute_time_scale!r}")
    k = float(compute_time_scale)
    new_name = name if name is not None else f"{profile.name}-x{k:g}"
    basis = compute_basis if compute_basis is not None else (
        f"derived: {profile.name} compute time {profile.compute_s_per_iteration:g} s x {k:g}")
    return DeviceProfile(
        name=new_name,
        device_class=profile.device_class,
        compute_s_per_iteration=profile.compute_s_per_iteration * k,
        compute_basis=basis,
        batch_size=profile.batch_size,
        power=profile.power,
        power_basis=profile.power_basis if power_basis is None else power_basis,
        power_sensor=profile.power_sensor if power_sensor is None else _check_sensors(power_sensor),
        scaled_from=profile.scaled_from + (ScaleRecord(profile=profile.name, compute_time_scale=k),),
        compute_fit=profile.compute_fit,  # the shape; pacing anchors it at the scaled time
    )


# ---------------------------------------------------------------------------------------------
# field checks

_HINTS = {
    "name": "a lowercase identifier equal to the file name, e.g. name: jetson-xavier-nx",
    "device_class": f"one of {' | '.join(DEVICE_CLASSES)}",
    "compute_s_per_iteration": "seconds of compute per iteration to pace to, e.g. 1.12",
    "compute_basis": "a string starting with 'measured:', 'derived:' or 'assumption:' saying where the time comes from",
    "batch_size": "an integer >= 1, e.g. 24 on a robot, 16 on a laptop (Table II)",
    "power_w": "a mapping with compute, communication and stall watts (idle optional), e.g. power_w: {compute: 13.35, communication: 4.25, stall: 4.04}",
    "power_basis": "a string starting with 'measured:', 'derived:' or 'assumption:' saying where the watts come from",
    "power_sensor": f"a list in preference order from {', '.join(POWER_SENSORS)}, e.g. [jtop, model]",
    "scaled_from": "a list of {profile: <name>, compute_time_scale: <factor>} written by scale_profile",
    "compute_ratios": "optional: one compute time multiple per worker of the team, e.g. [1, 1, 3] (ADSP's setting)",
    "compute_fit": "optional: measured seconds per pass a_s + c_s_per_sample x batch with its basis; write it with python -m rog.testbed.compute_fit --write",
}


def _required_top() -> list[str]:
    return [k for k in _TOP_FIELDS if k not in _OPTIONAL_TOP]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_keys(mapping: Mapping, known: Iterable[str], prefix: str, errors: list[str]) -> None:
    known = tuple(known)
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            errors.append(f"field {prefix + str(key)!r}: unknown field ({hint}known fields: {', '.join(known)})")


def _v_name(v):
    if not isinstance(v, str) or not _NAME_RE.match(v):
        raise ValueError(f"must be a lowercase identifier (letters, digits, '.', '_', '-'), got {v!r}")
    return v


def _v_class(v):
    if v not in DEVICE_CLASSES:
        raise ValueError(f"unknown device class {v!r}")
    return v


def _v_seconds(v):
    if not _is_number(v) or not v > 0:
        raise ValueError(f"must be a number of seconds > 0, got {v!r}")
    return float(v)


def _v_batch(v):
    if not _is_int(v) or v < 1:
        raise ValueError(f"must be an integer >= 1, got {v!r}")
    return int(v)


def _check_basis(name: str, v) -> None:
    try:
        _v_basis(name, v)
    except ValueError as e:
        raise ValueError(f"{name} {e}") from None


def _v_basis(name: str, v):
    if not isinstance(v, str) or not v.startswith(BASIS_PREFIXES) or not v.split(":", 1)[1].strip():
        raise ValueError(f"must start with one of {', '.join(BASIS_PREFIXES)} followed by the source, got {v!r}")
    return v


def _check_sensors(v) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"power_sensor must be one of {', '.join(POWER_SENSORS)} or a non-empty list of them, got {v!r}")
    for s in items:
        if s not in POWER_SENSORS:
            raise ValueError(f"unknown power sensor {s!r}; known: {', '.join(POWER_SENSORS)}")
    if len(set(items)) != len(items):
        raise ValueError(f"power_sensor lists a sensor twice: {list(items)}")
    if "model" in items and items[-1] != "model":
        raise ValueError(f"sensors after 'model' are never used (the model is always available); put 'model' last: {list(items)}")
    return tuple(items)


def _v_power(v, errors: list[str]) -> PowerFigures | None:
    if not isinstance(v, Mapping):
        errors.append(f"field 'power_w': must be a mapping, got {v!r} ({_HINTS['power_w']})")
        return None
    n = len(errors)
    _check_keys(v, _POWER_FIELDS, "power_w.", errors)
    watts = {}
    for key in _POWER_FIELDS:
        if key not in v:
            if key != "idle":
                errors.append(f"field 'power_w.{key}': missing (watts in the {key} state, a number > 0)")
            continue
        w = v[key]
        if not _is_number(w) or not w > 0:
            errors.append(f"field 'power_w.{key}': must be a number of watts > 0, got {w!r}")
            continue
        watts[key] = float(w)
    if len(errors) > n:
        return None
    return PowerFigures(compute_w=watts["compute"], communication_w=watts["communication"],
                       stall_w=watts["stall"], idle_w=watts.get("idle"))


def _v_scaled(v, errors: list[str]) -> tuple[ScaleRecord, ...]:
    if not isinstance(v, list) or not v:
        errors.append(f"field 'scaled_from': must be a non-empty list, got {v!r} ({_HINTS['scaled_from']})")
        return ()
    out = []
    for i, item in enumerate(v):
        prefix = f"scaled_from[{i}]."
        if not isinstance(item, Mapping):
            errors.append(f"field 'scaled_from[{i}]': must be a mapping ({_HINTS['scaled_from']})")
            continue
        n = len(errors)
        _check_keys(item, _SCALE_FIELDS, prefix, errors)
        for key in _SCALE_FIELDS:
            if key not in item:
                errors.append(f"field '{prefix}{key}': missing ({_HINTS['scaled_from']})")
        if len(errors) > n:
            continue
        try:
            out.append(ScaleRecord(profile=item["profile"], compute_time_scale=item["compute_time_scale"]))
        except ValueError as e:
            errors.append(f"field '{prefix[:-1]}': {e}")
    return tuple(out)


def _v_ratios(v) -> tuple[float, ...]:
    """``compute_ratios``: a list of positive numbers (empty: every worker at the profile's time)."""
    if v is None or (isinstance(v, (list, tuple)) and not v):
        return ()
    if not isinstance(v, (list, tuple)) or not all(_is_number(x) and x > 0 for x in v):
        raise ValueError(f"must be a list of positive numbers, got {v!r}")
    return tuple(float(x) for x in v)
