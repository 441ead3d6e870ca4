"""The testbed: ``tc`` trace replay (:mod:`.tc`, :mod:`.replay`) and the emulated namespace testbed (:mod:`.netns`).

Linux only, and root for anything that changes the network; building commands (``--dry-run``)
and schedules works anywhere.  Names are imported lazily (so ``python -m rog.testbed.netns``
runs its probes without importing itself twice).
"""

import importlib

_EXPORTS = {
    "NO_NETNS_WARNING": "netns", "Testbed": "netns", "cleanup_prefix": "netns", "have_root_netns": "netns",
    "no_netns_warning": "netns", "root_netns_status": "netns",
    "ReplayHandle": "replay", "ReplayOptions": "replay", "Replayer": "replay", "Schedule": "replay",
    "build_schedule": "replay",
    "MIN_RATE_MBIT": "tc", "Shaper": "tc", "Target": "tc", "TcError": "tc", "shape_params": "tc",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rog.testbed.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rog.testbed' has no attribute {name!r}")
