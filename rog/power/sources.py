"""Live power sensors: jetson-stats on a Jetson, Intel RAPL and NVML on x86, and how to pick one.

* ``jtop``: jetson-stats 4.x-7.x, ``jetson.power['tot']['power']`` in mW: the whole board (CPU,
  GPU, memory, wireless card), the sensor the paper used.  Imported only when asked for.
* ``rapl``: ``/sys/class/powercap/intel-rapl:<n>/energy_uj``, summed over the package domains
  (``name`` = ``package-<n>``; ``psys`` is skipped so nothing is counted twice).  It counts the CPU
  package only (not GPU, screen or Wi-Fi).  The counter wraps at ``max_energy_range_uj``; power
  is the counter's increase over the time between two reads.  Since Linux 5.10 ``energy_uj`` is
  readable by root only.
* ``nvml``: ``pynvml``, the sum of ``nvmlDeviceGetPowerUsage`` (mW) over the GPUs: the GPU board
  only.  Imported only when asked for and only if installed.

Where none is available, :func:`detect_power_source` answers ``model``: energy then comes from the
state timeline (:mod:`rog.power.energy`), labelled ``model:<profile name>``.

:data:`POWER_SOURCES` (a :class:`rog.registry.Registry`) maps each name to its opener
``(sysfs_root, jetson_root, interval_s) -> PowerSource`` (``None`` for the model, which is no live sensor).
A new sensor = its :class:`PowerSource` subclass + one line there; ``scripts/power_sampler.py --source``
takes its choices from it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from rog.registry import Registry

__all__ = [
    "DEFAULT_PREFERENCE", "RAPL_ROOT", "PowerSourceUnavailable", "PowerSource",
    "JtopSource", "RaplSource", "NvmlSource", "is_jetson", "jtop_total_w",
    "probe_power_sources", "detect_power_source", "open_power_source", "POWER_SOURCES", "is_sensor",
]

DEFAULT_PREFERENCE = ("jtop", "rapl", "nvml", "model")
RAPL_ROOT = "/sys/class/powercap"


class PowerSourceUnavailable(RuntimeError):
    """This sensor cannot be used here; the message says why."""


class PowerSource:
    """A live sensor: :meth:`read_w` returns watts now (None while a counter has only one reading)."""

    name = "?"  # the label written in every sample row

    def read_w(self) -> float | None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        """Release the sensor (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# jetson-stats


def is_jetson(root: str | Path = "/") -> bool:
    """True on an NVIDIA Jetson (L4T release file, or a device-tree model naming a Jetson)."""
    root = Path(root)
    if (root / "etc/nv_tegra_release").exists():
        return True
    try:
        model = (root / "proc/device-tree/model").read_bytes().decode("utf-8", "replace")
    except OSError:
        return False
    return "jetson" in model.lower()


JTOP_INPUT_RAILS = ("VDD_IN", "POM_5V_IN")  # the board's input rail (Orin/Xavier NX, Nano/TX2): the whole board


def jtop_total_w(power) -> float:
    """Total board watts from jetson-stats' ``jetson.power`` (4.x-7.x: ``power['tot']['power']`` in mW).

    jetson-stats 4.0 and later report ``{'rail': {name: {'power': mW, 'avg': mW, ...}}, 'tot': {'power':
    mW, ...}}``; a report without ``tot`` falls back to the board's input rail (``VDD_IN`` or
    ``POM_5V_IN``), the one rail that covers the whole board.  An empty report (the service found no
    sensor) and the 3.x tuple ``(total, rails)`` are refused with what to do."""
    if isinstance(power, dict) and not power:
        raise PowerSourceUnavailable("jetson-stats found no power sensor on this board (jetson.power is empty); "
                                     "check the INA3221 driver (jtop --health) or pick another source")
    try:
        tot = power.get("tot") if isinstance(power, dict) else None
        if tot is None and isinstance(power, dict):
            rails = power.get("rail") or {}
            tot = next((rails[name] for name in JTOP_INPUT_RAILS if name in rails), None)
        mw = tot["power"]
    except (TypeError, KeyError, IndexError, AttributeError):
        raise PowerSourceUnavailable(
            "jetson-stats reported power in an unknown layout (expected jetson.power['tot']['power'] in mW, "
            "jetson-stats 4.x-7.x); upgrade jetson-stats: sudo pip3 install -U jetson-stats") from None
    if isinstance(mw, bool) or not isinstance(mw, (int, float)) or mw < 0:
        raise PowerSourceUnavailable(f"jetson-stats total power is not a number of mW: {mw!r}")
    return float(mw) / 1000.0


class JtopSource(PowerSource):
    """Whole-board power from jetson-stats (``from jtop import jtop``, imported here, lazily)."""

    name = "jtop"

    def __init__(self, interval_s: float = 0.1, factory: Callable[..., object] | None = None) -> None:
        if factory is None:
            try:
                from jtop import jtop as factory  # noqa: PLC0415 - only on a Jetson
            except ImportError:
                raise PowerSourceUnavailable("jetson-stats is not installed (on the Jetson: sudo pip3 install "
                                             "jetson-stats, then reboot or restart the jtop service)") from None
        self._jetson = factory(interval=interval_s)
        try:
            self._jetson.start()
        except Exception as e:  # jtop raises its own JtopException when the service is down
            raise PowerSourceUnavailable(f"cannot start jetson-stats: {e} (is the jtop service running? "
                                         f"sudo systemctl restart jtop.service)") from None
        self._open = True

    def read_w(self) -> float | None:
        return jtop_total_w(self._jetson.power)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._jetson.close()


# ---------------------------------------------------------------------------------------------
# Intel RAPL


class RaplSource(PowerSource):
    """CPU-package power from the RAPL energy counters under ``sysfs_root`` (wrap-corrected, summed)."""

    name = "rapl"

    def __init__(self, sysfs_root: str | Path = RAPL_ROOT, clock: Callable[[], float] = time.monotonic) -> None:
        root = Path(sysfs_root)
        if not root.is_dir():
            raise PowerSourceUnavailable(f"no RAPL: {root} does not exist (no powercap driver, or not an Intel/AMD "
                                         f"x86 host, or /sys not mounted in this container)")
        zones = []
        for d in sorted(root.glob("intel-rapl:*")):
            suffix = d.name.split(":", 1)[1]
            if not suffix.isdigit():  # intel-rapl:0:1 etc. are sub-domains (core, uncore, dram)
                continue
            try:
                zone_name = (d / "name").read_text().strip()
            except OSError:
                continue
            if zone_name.startswith("package"):
                zones.append(d)
        if not zones:
            raise PowerSourceUnavailable(f"no RAPL package domain under {root} (no intel-rapl:<n> with name package-<n>)")
        self._energy_files = [d / "energy_uj" for d in zones]
        self.domains = [d.name for d in zones]
        try:
            self._max_uj = [int((d / "max_energy_range_uj").read_text()) for d in zones]
        except (OSError, ValueError) as e:
            raise PowerSourceUnavailable(f"cannot read max_energy_range_uj under {root}: {e}") from None
        self._clock = clock
        self._last_uj = self._read_uj()  # raises PowerSourceUnavailable when not readable
        self._last_t = clock()
        self._total_uj = 0

    def _read_uj(self) -> list[int]:
        values = []
        for f in self._energy_files:
            try:
                values.append(int(f.read_text()))
            except PermissionError:
                raise PowerSourceUnavailable(f"{f} is not readable (root only since Linux 5.10, CVE-2020-8694): "
                                             f"run the sampler as root or chmod o+r that file") from None
            except (OSError, ValueError) as e:
                raise PowerSourceUnavailable(f"cannot read {f}: {e}") from None
        return values

    def _advance(self) -> tuple[int, float]:
        """Read the counters; the energy in µJ and seconds since the previous read (wraps undone)."""
        now_uj, now_t = self._read_uj(), self._clock()
        delta = 0
        for prev, cur, top in zip(self._last_uj, now_uj, self._max_uj):
            d = cur - prev
            if d < 0:  # the counter wrapped past max_energy_range_uj
                d += top
            delta += d
        dt = now_t - self._last_t
        self._last_uj, self._last_t = now_uj, now_t
        self._total_uj += delta
        return delta, dt

    def read_w(self) -> float | None:
        """Mean watts since the previous read (or since opening); None if no time has passed."""
        delta_uj, dt = self._advance()
        return delta_uj / 1e6 / dt if dt > 0 else None

    def energy_j(self) -> float:
        """Joules counted since this source opened (read at least once per counter wrap period)."""
        self._advance()
        return self._total_uj / 1e6


# ---------------------------------------------------------------------------------------------
# NVML


class NvmlSource(PowerSource):
    """GPU board power from NVML, summed over every GPU (``pynvml`` imported here, lazily)."""

    name = "nvml"

    def __init__(self, module=None) -> None:
        if module is None:
            try:
                import pynvml as module  # noqa: PLC0415 - only where installed
            except ImportError:
                raise PowerSourceUnavailable("pynvml is not installed (pip install nvidia-ml-py; needs an NVIDIA "
                                             "driver)") from None
        self._nvml = module
        try:
            module.nvmlInit()
        except Exception as e:  # NVMLError: no driver / no GPU
            raise PowerSourceUnavailable(f"NVML cannot start: {e} (no NVIDIA driver or GPU)") from None
        self._open = True
        try:
            count = int(module.nvmlDeviceGetCount())
            if count < 1:
                raise PowerSourceUnavailable("NVML sees no GPU")
            self._handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.read_w()  # fails here if the GPU does not report power
        except PowerSourceUnavailable:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise PowerSourceUnavailable(f"NVML cannot read GPU power: {e}") from None

    def read_w(self) -> float | None:
        return sum(float(self._nvml.nvmlDeviceGetPowerUsage(h)) for h in self._handles) / 1000.0

    def close(self) -> None:
        if self._open:
            self._open = False
            self._nvml.nvmlShutdown()


# ---------------------------------------------------------------------------------------------
# choosing


def _open_jtop(sysfs_root: str | Path, jetson_root: str | Path, interval_s: float) -> PowerSource:
    if not is_jetson(jetson_root):
        raise PowerSourceUnavailable("not a Jetson (no /etc/nv_tegra_release, no Jetson device-tree model)")
    return JtopSource(interval_s=interval_s)


POWER_SOURCES: Registry = Registry("power source", [
    ("jtop", _open_jtop),
    ("rapl", lambda sysfs_root, jetson_root, interval_s: RaplSource(sysfs_root)),
    ("nvml", lambda sysfs_root, jetson_root, interval_s: NvmlSource()),
    ("model", None),  # the state-timeline model: always usable, never opened
])


def is_sensor(name: object) -> bool:
    """Whether ``name`` is a registered live sensor (a source of :data:`POWER_SOURCES` other than the model)."""
    return name in POWER_SOURCES and POWER_SOURCES[name] is not None


def open_power_source(name: str, sysfs_root: str | Path = RAPL_ROOT, jetson_root: str | Path = "/",
                      interval_s: float = 0.1) -> PowerSource:
    """Open sensor ``name`` (one of :data:`POWER_SOURCES`: 'jtop', 'rapl', 'nvml', ...); PowerSourceUnavailable
    says why it cannot, an unknown name is a ValueError naming the known ones."""
    opener = POWER_SOURCES[name]
    if opener is None:
        raise ValueError("the model is not a live sensor: compute its energy from the state timeline "
                         "(rog.power.model_energy_j / report_from_events)")
    return opener(sysfs_root, jetson_root, interval_s)


def probe_power_sources(names: Iterable[str] = DEFAULT_PREFERENCE, sysfs_root: str | Path = RAPL_ROOT,
                        jetson_root: str | Path = "/") -> dict[str, str | None]:
    """``{source: None if usable here, else the reason}`` for each of ``names`` (the model is always usable)."""
    out: dict[str, str | None] = {}
    for name in names:
        if POWER_SOURCES[name] is None:
            out[name] = None
            continue
        try:
            src = open_power_source(name, sysfs_root=sysfs_root, jetson_root=jetson_root)
        except PowerSourceUnavailable as e:
            out[name] = str(e)
        else:
            src.close()
            out[name] = None
    return out


def detect_power_source(preference: Sequence[str] | str = DEFAULT_PREFERENCE, sysfs_root: str | Path = RAPL_ROOT,
                        jetson_root: str | Path = "/") -> str:
    """The first source in ``preference`` usable here; ``'model'`` when none is (always the last resort)."""
    prefs = [preference] if isinstance(preference, str) else list(preference)
    for name in prefs:
        POWER_SOURCES.lookup(name)  # an unknown name is an error before anything is probed
    for name in prefs:
        if POWER_SOURCES[name] is None or probe_power_sources([name], sysfs_root, jetson_root)[name] is None:
            return name
    return "model"
