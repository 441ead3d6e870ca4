"""Which workload a run trains, its defaults, and how every process rebuilds it from ``config.yaml``.

``scripts/run.py --workload quick|cruda`` resolves the choice once, in the launcher
(:func:`resolve_workload`: model, batch size, learning rate, data files, weights), and writes the
result into the run's resolved config; the parameter server, the worker host, single workers on real
devices and ``scripts/test_checkpoints.py`` rebuild the same workload from that config only
(:func:`make_workload`), so every launcher path trains the same thing.

* ``quick``: :class:`rog.workloads.quick.QuickWorkload` (digits, no download), the quick ConvMLP,
  batch 32, learning rate 5e-5, device profile ``quick-cpu``.  The learning rate keeps the paper's regime
  (measured emulated outdoors, 70 s per run): with 5e-5 every system's accuracy still climbs at the end
  of the budget (BSP 55.8 -> 67 % over 16 iterations), as in the paper's 60-minute curves; with 2e-4
  it peaked after about 6 iterations and fell back by 3 points, so a target crossing was decided by
  the first few iterations.
* ``cruda``: :class:`rog.workloads.cruda.CrudaWorkload` (noisy Fed-CIFAR100 HDF5), ConvMLP-M at
  224 px, the batch size of the device profile (Table II: 24 on a robot, 16 on a laptop), learning
  rate 1e-6 (Table II), device profile ``jetson-xavier-nx``.  It needs
  ``<data_dir>/mixed_fed_cifar100_{train,test}.h5`` and the pre-trained ConvMLP-M CIFAR-100 weights
  (``utils/download_data.sh``, or ``python -m data_gen.make_tiny_fedcifar`` for generated data);
  without weights it refuses, unless ``random_init`` asks explicitly for a seeded random start.

The launcher imports this module without torch: the workload classes are imported only when built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Optional

from rog.registry import Registry, UnknownEntryError
from rog.workloads.spec import EvalOverrides, WorkloadSpec

__all__ = ["WORKLOADS", "QUICK_MODELS", "WorkloadDefaults", "CrudaEntries", "DEFAULTS", "WorkloadConfigError", "UnknownWorkloadError",
           "WorkloadSpec", "EvalOverrides", "resolve_workload", "make_workload", "num_classes"]

# --quick-model: the pre-trained ConvMLP (default) or a CNN trained from scratch (rog.models.quick_cnn;
# = rog.workloads.quick.SCRATCH_MODELS, kept torch-free here), which defaults to ScaDLES's ResNet152 rate
QUICK_MODELS = ("convmlp_quick", "cnn_bn_quick", "cnn_gn_quick", "vgg_bn_quick", "cnn_bn_wide_quick")
SCRATCH_LR = 0.1
CRUDA_TRAIN_FILE = "mixed_fed_cifar100_train.h5"  # = rog.workloads.cruda.TRAIN_FILE (kept torch-free here)
CRUDA_TEST_FILE = "mixed_fed_cifar100_test.h5"
CRUDA_WEIGHTS_FILE = "convmlp_m_cifar100.pth"
CRUDA_SPLITS = ("label_sorted", "pachinko", "dirichlet", "iid")
CRUDA_IMAGE_SIZE = 224  # Table II / the official ConvMLP CIFAR-100 fine-tuning config


class WorkloadConfigError(ValueError):
    """A workload choice that cannot run (missing data or weights, a flag for the other workload)."""


@dataclass(frozen=True)
class CrudaEntries:
    """The CRUDA workload's own ``config.yaml`` entries (flat keys beside ``workload: cruda``), as
    :func:`_resolve_cruda` writes them."""

    data_dir: str
    train_file: str
    test_file: str
    weights: Optional[str]  # None: --random-init
    random_init: bool
    split: str
    image_size: int
    normalize: str
    test_limit: Optional[int]


@dataclass(frozen=True)
class WorkloadDefaults:
    """A workload, as :data:`WORKLOADS` holds it: its defaults (model, classes, learning rate, samples per
    mini-batch (None: the device profile's ``batch_size``), the workers' device profile); ``resolve(defaults,
    **flags)``, its ``config.yaml`` entries checked before any process starts (the keyword arguments of
    :func:`resolve_workload`); ``build(spec)``, the workload object of a :class:`~rog.workloads.spec.WorkloadSpec`
    (imports torch, so only when called); ``build_eval(spec, overrides)``, the workload whose test set
    checkpoints are scored on (:class:`~rog.workloads.spec.EvalOverrides`: ``cache_dir``, ``data_dir``,
    ``test_limit`` given to ``scripts/test_checkpoints.py``, each None when not), at ``eval_batch`` samples per
    evaluation batch; ``entries``, the frozen dataclass of the workload's own ``config.yaml`` entries (flat keys
    that ``resolve`` writes beside the common ones; None: it has none)."""

    model: str
    num_classes: int
    lr: float
    base_batch: int | None
    profile: str
    resolve: Callable[..., dict] | None = None
    build: Callable[[WorkloadSpec], object] | None = None
    build_eval: Callable[[WorkloadSpec, EvalOverrides], object] | None = None
    eval_batch: int = 256
    entries: type | None = None


def _resolve_quick(d: WorkloadDefaults, *, data_dir=None, weights=None, random_init=False, test_limit=None, split=None,
                   model=None, **_) -> dict:
    given = [flag for flag, v in (("--data-dir", data_dir), ("--weights", weights), ("--random-init", random_init),
                                  ("--test-limit", test_limit), ("--split", split)) if v]
    if given:
        raise WorkloadConfigError(f"{', '.join(given)} belong(s) to --workload cruda; the quick workload needs "
                                  "no data files or weights (drop them, or add --workload cruda)")
    if model is not None and model not in QUICK_MODELS:
        raise WorkloadConfigError(f"--quick-model must be one of {', '.join(QUICK_MODELS)}; got {model!r}")
    name = model or d.model
    return dict(workload="quick", model=name, base_batch=d.base_batch,
                default_lr=d.lr if name == d.model else SCRATCH_LR)


def _given(**entries) -> dict:
    """The keyword arguments that are not None (a workload class's own defaults stand for the rest)."""
    return {k: v for k, v in entries.items() if v is not None}


def _build_quick(spec: WorkloadSpec):
    from .quick import QuickWorkload

    part = {"split": spec.partition} if spec.partition else {}  # --partition (rog.experiment.topk_options)
    return QuickWorkload(seed=spec.seed, n_workers=spec.require_workers(), cache_dir=spec.cache_dir, **part)


def _build_eval_quick(spec: WorkloadSpec, overrides: EvalOverrides):
    from .quick import QuickWorkload

    return QuickWorkload(seed=spec.seed, n_workers=spec.workers or 1, cache_dir=overrides.cache_dir or spec.cache_dir,
                         **_given(noise=spec.noise, split=spec.split, alpha=spec.alpha))


def _resolve_cruda(d: WorkloadDefaults, *, profile_batch_size=None, data_dir=None, weights=None, random_init=False,
                   test_limit=None, split=None, root=".", model=None) -> dict:
    if model is not None:
        raise WorkloadConfigError("--quick-model belongs to --workload quick; the cruda workload trains ConvMLP-M "
                                  "(drop --quick-model)")
    if profile_batch_size is None or isinstance(profile_batch_size, bool) or int(profile_batch_size) < 1:
        raise WorkloadConfigError(f"--workload cruda takes its batch size from the device profile (batch_size: 24 on a "
                                  f"robot, 16 on a laptop); got {profile_batch_size!r}")
    if test_limit is not None and (isinstance(test_limit, bool) or int(test_limit) < 1):
        raise WorkloadConfigError(f"--test-limit must be a positive number of test images; got {test_limit!r}")
    split = split or "label_sorted"
    if split not in CRUDA_SPLITS:
        raise WorkloadConfigError(f"--split must be one of {', '.join(CRUDA_SPLITS)}; got {split!r}")
    if random_init and weights is not None:
        raise WorkloadConfigError("--random-init and --weights exclude each other: --random-init ignores any weights file")
    ddir = Path(data_dir) if data_dir is not None else Path(root) / "data"
    ddir = ddir.resolve()
    missing = [f for f in (CRUDA_TRAIN_FILE, CRUDA_TEST_FILE) if not (ddir / f).is_file()]
    if missing:
        raise WorkloadConfigError(
            f"--data-dir {ddir}: missing {', '.join(missing)}. Download the artifact's noisy Fed-CIFAR100 with "
            f"`bash utils/download_data.sh --data-dir {ddir}`, or generate small files in the same HDF5 layout "
            f"with `python -m data_gen.make_tiny_fedcifar --out-dir {ddir}`")
    weights_path = None
    if not random_init:
        weights_path = (Path(weights) if weights is not None else ddir / CRUDA_WEIGHTS_FILE).resolve()
        if not weights_path.is_file():
            raise WorkloadConfigError(
                f"--weights {weights_path}: no pre-trained ConvMLP-M CIFAR-100 weights there. CRUDA adapts a "
                f"pre-trained model: fetch it with `bash utils/download_data.sh --only weights --data-dir {ddir}` "
                "(or pass --weights FILE). To start from a seeded RANDOM initialisation instead (smoke runs only; "
                "accuracies then say nothing about the paper), pass --random-init")
    return dict(
        workload="cruda",
        model=d.model,
        base_batch=int(profile_batch_size),
        default_lr=d.lr,
        data_dir=str(ddir),
        train_file=str(ddir / CRUDA_TRAIN_FILE),
        test_file=str(ddir / CRUDA_TEST_FILE),
        weights=None if weights_path is None else str(weights_path),
        random_init=bool(random_init),
        split=split,
        image_size=CRUDA_IMAGE_SIZE,
        normalize="cifar100",
        test_limit=None if test_limit is None else int(test_limit),
    )




def _build_cruda(spec: WorkloadSpec):
    from .cruda import CrudaWorkload

    missing = [k for k, v in (("data_dir", spec.data_dir), ("split", spec.split), ("image_size", spec.image_size))
               if v is None]
    if missing:
        raise WorkloadConfigError(f"config.yaml of a cruda run misses {missing}; re-create the run with scripts/run.py")
    kw = _given(alpha=spec.alpha, normalize=spec.normalize, train_file=spec.train_file, test_file=spec.test_file,
                test_limit=spec.test_limit)
    return CrudaWorkload(data_dir=spec.data_dir, n_workers=spec.require_workers(), split=spec.split,
                         image_size=spec.image_size, seed=spec.seed, pretrained_path=spec.weights,
                         random_init=spec.random_init, **kw)


def _build_eval_cruda(spec: WorkloadSpec, overrides: EvalOverrides):
    from .cruda import CrudaWorkload

    kw = _given(split=spec.split, alpha=spec.alpha, image_size=spec.image_size, normalize=spec.normalize,
                train_file=spec.train_file, test_file=spec.test_file)
    test_limit = overrides.test_limit if overrides.test_limit is not None else spec.test_limit
    data_dir = overrides.data_dir or spec.data_dir or "data"
    return CrudaWorkload(data_dir=data_dir, n_workers=spec.workers or 1, seed=spec.seed, test_limit=test_limit, **kw)


class UnknownWorkloadError(UnknownEntryError, WorkloadConfigError):
    """A workload name :data:`WORKLOADS` does not hold."""


WORKLOADS: Registry = Registry("workload", [
    ("quick", WorkloadDefaults(model="convmlp_quick", num_classes=10, lr=5e-5, base_batch=32, profile="quick-cpu",
                               resolve=_resolve_quick, build=_build_quick, build_eval=_build_eval_quick,
                               eval_batch=256)),
    ("cruda", WorkloadDefaults(model="convmlp_m", num_classes=100, lr=1e-6, base_batch=None, profile="jetson-xavier-nx",
                               resolve=_resolve_cruda, build=_build_cruda, build_eval=_build_eval_cruda,
                               eval_batch=64, entries=CrudaEntries)),
], error=UnknownWorkloadError)
DEFAULTS = WORKLOADS  # name -> WorkloadDefaults (the same registry, by its older name)


def num_classes(workload: str) -> int:
    """Classes of ``workload``'s model head (10 digits, 100 CIFAR-100 fine labels)."""
    return WORKLOADS[workload].num_classes


def resolve_workload(workload: str = "quick", *, profile_batch_size: int | None = None,
                     data_dir: str | os.PathLike | None = None, weights: str | os.PathLike | None = None,
                     random_init: bool = False, test_limit: int | None = None, split: str | None = None,
                     root: str | os.PathLike = ".", model: str | None = None) -> dict:
    """The config entries of ``workload`` (keys of the run's ``config.yaml``), checked before any process starts.

    Always: ``workload``, ``model``, ``base_batch`` (samples per mini-batch: the quick default, or for
    CRUDA ``profile_batch_size``), ``default_lr``.  CRUDA adds ``data_dir`` (absolute; default
    ``<root>/data``), ``train_file``/``test_file``, ``weights`` (absolute path, or None with
    ``random_init``), ``random_init``, ``split`` (default ``label_sorted``, as the artifact),
    ``image_size`` (224), ``normalize``, ``test_limit``.  ``model`` (quick only, ``--quick-model``): one of
    :data:`QUICK_MODELS`; a from-scratch CNN defaults to learning rate 0.1.  Raises :class:`WorkloadConfigError` naming
    the flag and the fix (an unknown workload: :class:`UnknownWorkloadError`).
    """
    d = WORKLOADS[workload]
    return d.resolve(d, profile_batch_size=profile_batch_size, data_dir=data_dir, weights=weights,
                     random_init=random_init, test_limit=test_limit, split=split, root=root, model=model)


def make_workload(cfg: Mapping | WorkloadSpec):
    """The workload object of a resolved run config (a ``config.yaml`` dict of any age, or its
    :class:`~rog.workloads.spec.WorkloadSpec`): ``QuickWorkload``, ``CrudaWorkload`` or whatever the workload's
    ``build`` makes.

    Reads ``workload`` (default ``quick``), ``seed``, ``workers`` and ``cache_dir``; for CRUDA the keys
    :func:`resolve_workload` wrote (a missing or mistyped one: :class:`~rog.errors.ConfigError`).  Imports torch."""
    spec = cfg if isinstance(cfg, WorkloadSpec) else WorkloadSpec.from_dict(cfg)
    if spec.workload not in WORKLOADS:
        raise UnknownWorkloadError(f"config.yaml: {WORKLOADS.unknown(spec.workload)}")
    return WORKLOADS[spec.workload].build(spec)
