"""What a workload is rebuilt from: the entries of a run's ``config.yaml`` that the workload registry's
``build`` and ``build_eval`` read, typed.

:meth:`WorkloadSpec.from_dict` takes a ``config.yaml`` dict of any age (a :class:`RunConfig`'s
``to_dict()``, an older run's file, the launcher's partial dict) and reads only these entries, by
name; the rest of the file is not its concern.  A missing ``seed``, or an entry of the wrong type,
raises :class:`~rog.errors.ConfigError` naming the source and the field.  Standard library only (the
registry stays torch-free).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from rog.errors import ConfigError

__all__ = ["WorkloadSpec", "EvalOverrides"]


def _int(d: Mapping, key: str, source: str, required: bool = False) -> Optional[int]:
    value = d.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{source}: {key}: missing (re-create the run with scripts/run.py)")
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{source}: {key}: expected an integer, got {value!r}")
    return int(value)


def _str(d: Mapping, key: str, source: str) -> Optional[str]:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {key}: expected a string, got {value!r}")
    return value


def _path(d: Mapping, key: str, source: str) -> Optional[str]:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: {key}: expected a path, got {value!r}")
    return str(value)


def _float(d: Mapping, key: str, source: str) -> Optional[float]:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: {key}: expected a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class WorkloadSpec:
    """The workload entries of a run's ``config.yaml`` (None: absent from the file).

    Every workload: ``workload`` (default ``quick``), ``model``, ``seed``, ``workers``, ``cache_dir``.
    The quick workload: ``partition`` (``--partition``), and ``noise``, ``split``, ``alpha`` of older
    runs.  CRUDA: ``data_dir``, ``train_file``, ``test_file``, ``weights``, ``random_init``, ``split``,
    ``image_size``, ``normalize``, ``test_limit``, ``alpha``."""

    seed: int
    workload: str = "quick"
    model: Optional[str] = None
    workers: Optional[int] = None
    cache_dir: Optional[str] = None
    partition: Optional[str] = None
    noise: Optional[str] = None
    split: Optional[str] = None
    alpha: Optional[float] = None
    data_dir: Optional[str] = None
    train_file: Optional[str] = None
    test_file: Optional[str] = None
    weights: Optional[str] = None
    random_init: bool = False
    image_size: Optional[int] = None
    normalize: Optional[str] = None
    test_limit: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "config.yaml") -> WorkloadSpec:
        """The workload entries of ``d``; a missing ``seed`` or a mistyped entry raises
        :class:`~rog.errors.ConfigError` naming ``source`` and the field."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"{source}: expected a mapping of configuration keys, got {type(d).__name__}")
        random_init = d.get("random_init")
        if random_init is not None and not isinstance(random_init, bool):
            raise ConfigError(f"{source}: random_init: expected true/false, got {random_init!r}")
        return cls(
            seed=_int(d, "seed", source, required=True),
            workload=_str(d, "workload", source) or "quick",
            model=_str(d, "model", source),
            workers=_int(d, "workers", source),
            cache_dir=_path(d, "cache_dir", source),
            partition=_str(d, "partition", source),
            noise=_str(d, "noise", source),
            split=_str(d, "split", source),
            alpha=_float(d, "alpha", source),
            data_dir=_path(d, "data_dir", source),
            train_file=_path(d, "train_file", source),
            test_file=_path(d, "test_file", source),
            weights=_path(d, "weights", source),
            random_init=bool(random_init),
            image_size=_int(d, "image_size", source),
            normalize=_str(d, "normalize", source),
            test_limit=_int(d, "test_limit", source),
        )

    def require_workers(self, source: str = "config.yaml") -> int:
        """``workers``, which training needs; :class:`~rog.errors.ConfigError` if absent."""
        if self.workers is None:
            raise ConfigError(f"{source}: workers: missing (re-create the run with scripts/run.py)")
        return self.workers


@dataclass(frozen=True)
class EvalOverrides:
    """What ``scripts/test_checkpoints.py`` overrides when it rebuilds a run's test set (None: not given):
    ``--cache-dir``, ``--data-dir``, ``--test-limit``."""

    cache_dir: Optional[str] = None
    data_dir: Optional[str] = None
    test_limit: Optional[int] = None
