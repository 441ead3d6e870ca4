"""What a workload is rebuilt from: the entries of a run's ``config.yaml`` that the workload registry's
``build`` and ``build_eval`` read, typed.

:meth:`WorkloadSpec.from_dict` takes a ``config.yaml`` dict of any age (a :class:`RunConfig`'s
``to_dict()``, an older run's file, the launcher's partial dict) and reads only these entries, by
name; the rest of the file is not its concern.  A missing ``seed``, or an entry of the wrong type,
raises :class:`~rog.errors.ConfigError` naming the source and the field.  Standard library only (the
registry stays torch-free).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from rog.config_entries import PATH, entry, require_mapping
from rog.errors import ConfigError

__all__ = ["WorkloadSpec", "EvalOverrides"]


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
        require_mapping(d, source)
        seed = entry(d, "seed", int, source, missing="(re-create the run with scripts/run.py)")
        random_init = entry(d, "random_init", bool, source)
        kinds = {"workload": str, "model": str, "workers": int, "cache_dir": PATH, "partition": str, "noise": str,
                 "split": str, "alpha": float, "data_dir": PATH, "train_file": PATH, "test_file": PATH,
                 "weights": PATH, "image_size": int, "normalize": str, "test_limit": int}
        kw = {key: entry(d, key, kind, source) for key, kind in kinds.items()}
        kw["workload"] = kw["workload"] or "quick"
        return cls(seed=seed, random_init=bool(random_init), **kw)

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
