"""run.py flags for every codec's options (ScaDLES's Top-k and its adaptive gate), non-IID partitions and
(alpha, beta) data injection; their checks, and what they resolve to in ``config.yaml``.

* every registered codec that declares options (:attr:`rog.codecs.compression.Codec.options`, a frozen
  dataclass of :mod:`rog.options`) gets their flags in its ``options_group``; the chosen codec's options
  are ``config.yaml``'s ``compression_options`` and its constructor's keyword arguments
  (:func:`codec_options`).  A new codec's options need no line here.  Top-k
  (:class:`rog.codecs.codecs_topk.Options`): ``--compression topk`` with ``--topk-ratio CR`` (share of each
  tensor's elements sent, ScaDLES 0.1 or 0.01), ``--topk-gate on|off`` (on: the energy gate decides per
  iteration between Top-k and dense; off: always Top-k), ``--topk-gate-delta`` (the energy share Top-k may
  lose, ScaDLES 0.3) and ``--topk-gate-smoothing`` (the EWMA weight of the past statistic),
  ``--topk-gate-statistic energy|norm`` (the paper's formula or the released code's).
* ``--partition iid|labels:K|dirichlet:ALPHA|label_sorted`` (quick workload): how the adaptation data is
  split across workers; recorded as ``partition``.
* ``--quick-model``: the quick workload's model, the pre-trained ConvMLP or a CNN trained from scratch
  (:data:`rog.workloads.registry.QUICK_MODELS`); recorded as ``model``.
* ``--inject-alpha A --inject-beta B`` (:class:`rog.streams.inject.Options`): each iteration ``ceil(A N)`` senders each give ``floor(B b)``
  samples of their batch to a peer; ``--inject-mode network`` sends them as raw arrays through a relay
  in the parameter server's namespace (over the shaped links, bytes in the event logs), ``local`` is the
  released code's shortcut (samples drawn locally from the other labels, no bytes).  Recorded as
  ``inject``.

Every bad value exits with one line naming the flag and the fix (:class:`OptionError`).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any, Mapping

from rog.errors import ConfigError

from ..codecs.codec_registry import CODECS
from ..options import add_entry_flags, add_option_flags, check_entry_options, entry_options, options_from
from ..streams import inject
from ..policies.registry import has_own_runtime, system_names
from ..workloads.registry import QUICK_MODELS
from ..workloads.split import PartitionSpecError, parse_partition
from .run_config import RunConfig

OptionError = ConfigError  # the older name of a bad flag value's error (the message names the flag and the fix)


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the flags to run.py's argument groups by concern (``compression``, ``workload``, ``injection``)."""
    add_entry_flags(groups, CODECS.items())  # every registered codec's options (rog.codecs.codec_registry)
    p = groups["workload"]
    p.add_argument("--partition", default=None,
                   help="quick workload: iid, labels:K (K labels per worker), dirichlet:ALPHA or label_sorted "
                        "(default label_sorted)")
    p.add_argument("--quick-model", choices=QUICK_MODELS, default=None,
                   help="quick workload: convmlp_quick (pre-trained, adapted; default), cnn_bn_quick (a BatchNorm CNN "
                        "trained from scratch, as ScaDLES's models), cnn_gn_quick (the same with GroupNorm), "
                        "vgg_bn_quick (its BatchNorm features with VGG's fully connected classifier) or "
                        "cnn_bn_wide_quick (cnn_bn_quick with widths 32, 64, 192)")
    add_option_flags(groups["injection"], inject.Options, inject.FLAG_PREFIX, "data injection")  # --inject-*


def check(a: argparse.Namespace) -> None:
    """Raise :class:`OptionError` for a bad combination or value (a codec's options: its dataclass's ConfigError)."""
    check_entry_options(a, CODECS.items())
    if a.partition is not None:
        if getattr(a, "workload", "quick") != "quick":
            raise OptionError("--partition is for --workload quick; the cruda workload takes --split")
        try:
            parse_partition(a.partition)
        except PartitionSpecError as e:
            raise OptionError(f"--partition: {e}") from None
    injecting = options_from(a, inject.Options, inject.FLAG_PREFIX).on  # its own checks: ConfigError
    if injecting and a.workers < 2:
        raise OptionError("data injection needs at least 2 workers (--workers 2 or more), or drop --inject-alpha/--inject-beta")
    if injecting and a.inject_mode == "network" and getattr(a, "testbed", None) == "hosts":
        raise OptionError("--inject-mode network runs on the emulated or loopback testbed; use --inject-mode local on --testbed hosts")
    lib = getattr(a, "library", None)
    if injecting and lib is not None and has_own_runtime(lib):
        engine = ", ".join(n for n in system_names() if not has_own_runtime(n))
        raise OptionError(f"data injection is not wired into --library {lib} (its own runtime); choose {engine}")


def config_entries(a: argparse.Namespace) -> dict:
    """The ``config.yaml`` entries: ``compression_options`` (the codec's; None: it declares none), ``partition``,
    ``inject``."""
    injection = options_from(a, inject.Options, inject.FLAG_PREFIX)
    return dict(compression_options=entry_options(a, CODECS[a.compression]), partition=a.partition,
                inject=dataclasses.asdict(injection) if injection.on else None)


def codec_options(cfg: RunConfig, ps_workers: int | None = None) -> dict:
    """Keyword options of :func:`rog.codecs.codec_registry.make_codec` for this run: the codec's recorded options,
    and ``ps_workers`` for the parameter server's instance of a codec that takes it (Top-k's gate)."""
    opts = dict(cfg.compression.options or {})
    if ps_workers is not None and "ps_workers" in inspect.signature(CODECS[cfg.compression.codec]).parameters:
        opts["ps_workers"] = int(ps_workers)
    return opts
