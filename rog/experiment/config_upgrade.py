"""``config.yaml``'s earlier shapes and the one upgrader every reader uses (:func:`upgrade_config`).

Shapes, oldest first (``tests/data/config_shapes/`` holds one file of each):

* **before ``atp``** (until 2026-11-25, ``run_semantics`` 3 and below): no ``version``; none of the entries in
  :data:`ADDED_ENTRIES`; ROG ran the ``mandatory`` budget rule and the ``importance`` prefix
  (:data:`LEGACY_ATP`), which the run did not record.
* **one entry per policy** (2026-11-25 until version 2; :class:`RunConfig` from 2026-11-27 kept it): no
  ``version``; ROG's options under ``atp``, ADSP's under ``adsp``, Adaptive ADACOMM's under ``adacomm``
  (``null`` for every other system); the Top-k codec's under ``topk``.
* **version 2** (:data:`CONFIG_VERSION`): ``version: 2``; the chosen policy's options under
  ``policy_options`` and the chosen codec's under ``compression_options`` (``null``: it declares none),
  whatever the policy or codec: a new one's options land there without a new entry.

:func:`upgrade_config` turns any of them into the current shape with the values those runs really had, so
:meth:`RunConfig.from_dict <rog.experiment.run_config.RunConfig.from_dict>`, the analysis's loader and
resume read one shape.  Standard library only (the layer map counts this module as engine, like
:mod:`.run_config`): the old entries' names are history, written here once, not looked up.
"""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["CONFIG_VERSION", "LEGACY_ATP", "ADDED_ENTRIES", "OLD_POLICY_ENTRIES", "OLD_CODEC_ENTRY", "upgrade_config"]

CONFIG_VERSION = 2  # bump with every change of config.yaml's shape, and teach upgrade_config the older one

# what ROG ran before config.yaml recorded its ATP choices (a config without an ``atp`` entry)
LEGACY_ATP: Mapping[str, str] = MappingProxyType(dict(budget_rule="mandatory", prefix_order="importance"))

# entries config.yaml gained after its first shape, and what a run recorded without them ran
ADDED_ENTRIES: Mapping[str, Any] = MappingProxyType({
    "device": "cpu", "device_requested": "cpu",  # before --device, workers trained on the CPU
    "link_delay_ms": 0.0,  # no transport delay
    "compute_ratios": None, "compute_model": None,  # every worker paced alike, one constant per iteration
    "stream": None,  # no ScaDLES streams
    "schedule": {"name": "sequential", "epoch_iterations": None}, "pacing": "iteration",  # no DynaComm
    "compression_options": None, "partition": None, "inject": None,  # no Top-k codec, the default partition,
    # no injection
    "global_eval_every_s": None,  # the PS did not test the global model
    "flags": None,  # the flags were not kept (run.py --config cannot rerun such a run)
})

# the entry each policy's options lay in before version 2 (the shape of 2026-11-25 to version 2); the codec's: topk
OLD_CODEC_ENTRY = "topk"
OLD_POLICY_ENTRIES: Mapping[str, str] = MappingProxyType({"ROG": "atp", "ADSP": "adsp", "ADAPTIVE_ADACOMM": "adacomm"})
# what a run ran when that entry is absent (recorded before the entry existed)
UNRECORDED_OPTIONS: Mapping[str, Mapping] = MappingProxyType({"atp": LEGACY_ATP})


def upgrade_config(d: Mapping) -> dict:
    """``d`` (a ``config.yaml`` mapping of any shape above) in the current shape: a new dict, ``d`` untouched.

    A mapping with a ``version`` is returned as a copy (a newer or mistyped one: the reader's own checks name
    it); one without ``library`` (not a whole run's config) gets only its entries renamed."""
    out = copy.deepcopy(dict(d))
    if out.get("version") is not None:
        return out
    if OLD_CODEC_ENTRY in out:  # also in the partial configs of a paper home's own readers
        out["compression_options"] = out.pop(OLD_CODEC_ENTRY)
    if "library" not in out:
        return out
    for key, value in ADDED_ENTRIES.items():
        out.setdefault(key, copy.deepcopy(value))
    entries = {name: out.pop(name, None) for name in OLD_POLICY_ENTRIES.values()}
    entry = OLD_POLICY_ENTRIES.get(str(out["library"]).upper())
    options = entries.get(entry) if entry else None
    if options is None and entry in UNRECORDED_OPTIONS:
        options = dict(UNRECORDED_OPTIONS[entry])
    out["policy_options"] = options
    out["version"] = CONFIG_VERSION
    return out
