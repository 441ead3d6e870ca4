"""run.py's flags for every codec's options (ScaDLES's Top-k and its gate), the quick workload's ``--partition``
and ``--quick-model``, and ScaDLES's (alpha, beta) data injection; their checks and their ``config.yaml`` entries.

A codec that declares options (:attr:`rog.codecs.compression.Codec.options`, a frozen dataclass of
:mod:`rog.options` that checks its values, e.g. :class:`rog.codecs.codecs_topk.Options`) gets one flag per field
in its ``options_group``; the chosen codec's options are ``config.yaml``'s ``compression_options`` and its
constructor's keyword arguments.  A new codec's options need no line here.  Injection's flags are made from
:class:`rog.streams.inject.Options`: each iteration ``ceil(alpha N)`` senders give ``floor(beta b)`` samples to a
peer, through the parameter server's relay (``network``) or drawn locally (``local``, the released code's).
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
from ..policies.registry import engine_systems, has_own_runtime
from ..workloads.registry import QUICK_MODELS
from ..workloads.split import PartitionSpecError, parse_partition
from .run_config import RunConfig


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
    """Raise :class:`~rog.errors.ConfigError` for a bad combination or value (a codec's options: its dataclass's)."""
    check_entry_options(a, CODECS.items())
    if a.partition is not None:
        if getattr(a, "workload", "quick") != "quick":
            raise ConfigError("--partition is for --workload quick; the cruda workload takes --split")
        try:
            parse_partition(a.partition)
        except PartitionSpecError as e:
            raise ConfigError(f"--partition: {e}") from None
    injecting = options_from(a, inject.Options, inject.FLAG_PREFIX).on  # its own checks: ConfigError
    if injecting and a.workers < 2:
        raise ConfigError("data injection needs at least 2 workers (--workers 2 or more), or drop --inject-alpha/--inject-beta")
    if injecting and a.inject_mode == "network" and getattr(a, "testbed", None) == "hosts":
        raise ConfigError("--inject-mode network runs on the emulated or loopback testbed; use --inject-mode local on --testbed hosts")
    lib = getattr(a, "library", None)
    if injecting and lib is not None and has_own_runtime(lib):
        raise ConfigError(f"data injection is not wired into --library {lib} (its own runtime); choose "
                          f"{', '.join(engine_systems())}")


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
