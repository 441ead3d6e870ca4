"""The jtop power source against stand-in ``jtop`` modules shaped like jetson-stats' client APIs.

No Jetson is here, so each stand-in mimics one shape of ``jetson.power`` (jetson-stats 4.0 and later:
``{'rail': {...}, 'tot': {...}}`` in mW; a board whose service reports no ``tot``; a board with no
sensor; the 3.x tuple) and the client's life cycle (``jtop(interval=...)``, ``start()``, ``close()``).
The source is opened through ``from jtop import jtop``, as on a device.
"""

from __future__ import annotations

import sys
import types

import pytest

from rog.power.sources import JtopSource, PowerSourceUnavailable


def _module(power, start_error=None):
    calls = {"closed": 0, "interval": None}

    class jtop:  # noqa: N801 - the client class's real name
        def __init__(self, interval=0.5):
            calls["interval"] = interval

        def start(self):
            if start_error is not None:
                raise start_error

        @property
        def power(self):
            return power

        def close(self):
            calls["closed"] += 1

    mod = types.ModuleType("jtop")
    mod.jtop = jtop
    return mod, calls


RAIL = {"volt": 5016, "curr": 1720, "power": 8627, "avg": 8510, "warn": 32760, "crit": 32760, "online": True,
        "type": "I2C"}
SHAPES = {
    # 4.x: total next to the rails; 4.2+ added 'online'/'type' per rail, same keys under 'tot'
    "4.x-tot": ({"rail": {"VDD_IN": RAIL, "VDD_CPU_GPU_CV": dict(RAIL, power=2911)},
                 "tot": {"volt": 5016, "curr": 1720, "power": 8627, "avg": 8510, "name": "VDD_IN"}}, 8.627),
    # a service that reports the sum of its rails as the total ('name': 'ALL')
    "summed-tot": ({"rail": {"CPU": dict(RAIL, power=1200), "GPU": dict(RAIL, power=800)},
                    "tot": {"power": 2000, "avg": 1900, "name": "ALL"}}, 2.0),
    # no 'tot' key: the board's input rail is the whole board (Xavier NX / Orin: VDD_IN; Nano/TX2: POM_5V_IN)
    "input-rail-only": ({"rail": {"POM_5V_IN": dict(RAIL, power=4321), "POM_5V_GPU": dict(RAIL, power=900)}}, 4.321),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_jtop_source_reads_each_api_shape_in_watts(shape, monkeypatch):
    power, watts = SHAPES[shape]
    mod, calls = _module(power)
    monkeypatch.setitem(sys.modules, "jtop", mod)
    src = JtopSource(interval_s=0.25)
    assert calls["interval"] == 0.25
    assert src.read_w() == pytest.approx(watts, abs=1e-9)
    src.close()
    src.close()
    assert calls["closed"] == 1


@pytest.mark.parametrize("power, why", [
    ({}, "no power sensor"),
    (({"cur": 4000, "avg": 3900}, {}), "unknown layout"),  # 3.x: (total, rails)
    ({"rail": {"CPU": RAIL}}, "unknown layout"),  # rails but no total and no input rail: a sum could double count
    ({"tot": {"power": "n/a"}}, "not a number"),
])
def test_jtop_source_refuses_what_it_cannot_read(power, why, monkeypatch):
    mod, _ = _module(power)
    monkeypatch.setitem(sys.modules, "jtop", mod)
    src = JtopSource()
    with pytest.raises(PowerSourceUnavailable, match=why):
        src.read_w()


def test_jtop_service_down_is_unavailable(monkeypatch):
    mod, _ = _module({}, start_error=RuntimeError("The jtop.service is not active"))
    monkeypatch.setitem(sys.modules, "jtop", mod)
    with pytest.raises(PowerSourceUnavailable, match="jtop.service"):
        JtopSource()
