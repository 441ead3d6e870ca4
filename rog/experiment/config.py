"""The run's configuration: defaults, the workload and regime resolved from the flags, the run id.

:func:`resolve_config` turns parsed ``scripts/run.py`` arguments into the dict saved as
``config.yaml``; :func:`resolve` gives it typed (:class:`~.run_config.RunConfig`), as every layer reads
it; every child process reads only that file.  No torch here (the launcher and the
parameter server stay torch-free); the one torch-dependent number, the full push size, comes from
:mod:`.push_bytes` and is cached.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from rog.errors import ConfigError
from rog.options import options_from
from rog.paths import repo_root
from rog.policies import registry

from . import RUN_SEMANTICS, schedule_options as SCH, stream_options as STO, sync_options as SO, topk_options as TO
from .config_upgrade import CONFIG_VERSION
from .links import resolved_link_delay_ms
from .push_bytes import cached_full_push_bytes
from .run_config import SLOW_START_KEY, FaultOptions, RunConfig

ROOT = repo_root()  # the repository (code shipped to hosts, the manifest's git version)
RUN_MODULE = "rog.experiment"  # every child process runs ``python -m rog.experiment --child ...`` (from ROOT)
DEFAULT_WORKERS = 4  # workers when neither --workers nor a hosts file decides
DEFAULT_PS_PORT = 29500  # the parameter server's port on real devices (--testbed hosts) unless --port
BASE_BATCH = 32  # samples per mini-batch; -b multiplies it by gradient accumulation
DEFAULT_ITERATIONS = 300  # iterations per worker when neither --iterations nor --epoch is given
BUDGET_ITERATION_CAP = 1_000_000  # --budget-s without --iterations: the budget ends the run, not a count
DEFAULT_LR = 5e-5  # help text only: the default lr comes from rog.workloads.registry (quick 5e-5, CRUDA 1e-6)
DEFAULT_EVAL_EVERY = 25  # worker 0 tests its model every this many iterations
JOIN_TIMEOUT_S = 900.0  # how long the PS waits for every worker to connect (a loaded 2-core machine
# starting four torch processes over Fabric can take minutes; a crashed start still fails, only later)
BURST_BYTES = 2048  # token-bucket burst when --rate-mbit shapes links: small against a quick push (~27 KB), so
# measured transfer times (ROG's MTA time, FLOWN's bandwidth estimate) follow the rate, not the burst


def _resolve_workload(a: argparse.Namespace) -> dict:
    """--workload and its flags -> model, base batch, default lr and profile, plus the workload's own config keys
    (``entries``, e.g. CRUDA's data files); exits with the registry's message (missing data, missing weights)."""
    from rog.testbed.profiles import ProfileError, load_profile
    from rog.workloads.registry import DEFAULTS, WorkloadConfigError, resolve_workload

    profile_name = a.profile or DEFAULTS[a.workload].profile
    try:
        # a workload without its own batch size (CRUDA) takes the device profile's
        batch = load_profile(profile_name).batch_size if DEFAULTS[a.workload].base_batch is None else None
        wl = resolve_workload(a.workload, profile_batch_size=batch, data_dir=a.data_dir, weights=a.weights,
                              random_init=a.random_init, test_limit=a.test_limit, split=a.split, root=ROOT,
                              model=getattr(a, "quick_model", None))  # --quick-model (rog.experiment.topk_options)
    except (WorkloadConfigError, ProfileError) as e:
        raise ConfigError(f"--workload {a.workload}: {e}") from None
    base = {k: wl.pop(k) for k in ("workload", "model", "base_batch", "default_lr")}
    return dict(base, profile=profile_name, entries=wl)


def paced_compute_s(base_compute_s: float | None, batch_multiple: int, explicit: bool = False) -> float | None:
    """Compute time to pace one iteration to: the profile's time for one mini-batch times ``-b`` (the
    paper's batch item: "the computation time proportionally increased"); an explicit ``--compute-s``
    is per iteration and taken as given."""
    return base_compute_s if base_compute_s is None or explicit else base_compute_s * int(batch_multiple)


def resolve_config(a: argparse.Namespace) -> dict:
    """The full configuration of the run (saved as config.yaml; children read only this)."""
    from rog.experiment import traceplan as TP
    from rog.experiment.tracking import WIRE_FACTOR
    from rog.policies.registry import resolve_threshold
    from rog.testbed.profiles import ProfileError, load_profile

    try:
        threshold = resolve_threshold(a.library, a.threshold)
    except ValueError as e:
        raise ConfigError(f"--threshold: {e}") from None
    wl_cfg = _resolve_workload(a)
    cache_dir = Path(a.cache_dir) if a.cache_dir else Path(a.result_dir) / ".cache"  # pre-trained weights
    iterations = a.iterations
    if iterations is None and a.epoch is not None:
        from rog.workloads.registry import make_workload

        smallest = min(s.size for s in make_workload(dict(wl_cfg, seed=a.seed, workers=a.workers, cache_dir=cache_dir)).shards)
        iterations = max(1, math.ceil(a.epoch * smallest / (wl_cfg["base_batch"] * a.batchsize)))
    if iterations is None:
        iterations = BUDGET_ITERATION_CAP if a.time_budget_s is not None else DEFAULT_ITERATIONS

    # testbed: emulated unless asked otherwise; without root / netns the loopback fallback
    requested = a.testbed or ("loopback" if a.serve_only else "emulated")  # hosts: real devices (deploy_spec)
    testbed, fallback = requested, None
    if requested == "emulated":
        from rog.testbed.netns import root_netns_status

        ok, why = root_netns_status()
        if not ok:
            testbed, fallback = "loopback", why
    if getattr(a, "tcp_slow_start_after_idle", None) is not None and testbed != "emulated":
        raise ConfigError(f"--tcp-slow-start-after-idle sets TCP inside the emulated testbed's namespaces, which are "
                          f"not available here ({fallback}); the loopback fallback would change this host's own "
                          "setting: drop the flag, or run as root with 'ip netns'")
    # a user's trace without a label is custom; a constant --rate-mbit, or an explicit loopback, means no trace
    control = a.control or ("custom" if a.trace is not None else
                            "none" if requested == "loopback" or a.rate_mbit is not None else "outdoors")

    try:
        profile = load_profile(a.profile or wl_cfg["profile"])
        ps_profile = load_profile(a.ps_profile)
    except ProfileError as e:
        raise ConfigError(f"--profile/--ps-profile: {e}") from None
    if getattr(a, "compute_ratios", None) is None and profile.compute_ratios:  # the profile's team speeds
        a.compute_ratios = SO.parse_ratios(list(profile.compute_ratios), a.workers,
                                           source=f"--profile {profile.name}: compute_ratios")
    ratios = getattr(a, "compute_ratios", None)
    paced = control != "none" or a.profile is not None or ratios is not None  # unshaped runs stay unpaced
    base_compute_s = a.compute_s if a.compute_s is not None else (profile.compute_s_per_iteration if paced else None)
    compute_s = paced_compute_s(base_compute_s, a.batchsize, explicit=a.compute_s is not None)
    pacing = None
    if requested == "hosts" and paced and a.profile is None and a.compute_s is None:  # each host's own profile
        from .host_pacing import host_pacing

        try:
            pacing = host_pacing(a.hosts_file, a.batchsize, ratios)
        except ValueError as e:
            raise ConfigError(f"--hosts: {e}") from None
        base_compute_s, compute_s = pacing["regime_compute_s"], pacing["common_compute_s"]
    compute_model = None  # per-pass pacing: the profile's fit of compute vs batch, or its constant
    if compute_s and pacing is None:  # --compute-s 0: no pacing, so no model
        compute_model = profile.pacer(compute_s / a.batchsize, int(wl_cfg["base_batch"])).describe()
        compute_model["run_model"] = wl_cfg["model"]  # the fit's shape is its own model's (a note where they differ)

    trace, trace_info, offsets = TP.run_trace(a, control)  # what the links replay (None: unshaped)
    regime_codec = "none" if a.compression == "topk" else a.compression  # topk: the dense payload, the gate's fallback
    payload = cached_full_push_bytes(regime_codec, cache_dir, wl_cfg["model"], a.chunk_share) if trace is not None else 0
    reg = TP.regime(trace=trace, compute_s=base_compute_s, payload_bytes=payload, wire_factor=WIRE_FACTOR,
                    replay_mode=a.replay_mode, ratio=a.regime_ratio, time_scale=a.time_scale,
                    rate_scale=a.rate_scale, seed=a.seed)
    if trace is not None:
        reg["changed"] = [
            f"compute time {base_compute_s:g} s per mini-batch (paper {TP.PAPER['compute_s']} s; "
            + (f"profile {profile.name})" if pacing is None else f"the mean of the hosts' profiles {pacing['profiles']})")
            + (f", {compute_s:g} s per iteration of {a.batchsize} mini-batches (links keep the x1 regime)"
               if compute_s is not None and compute_s != base_compute_s else "")
            + ("; hosts at their own speed unpaced" if pacing and compute_s is None else ""),
            f"payload {payload} B per direction ({wl_cfg['model']}, {a.compression}; the paper: ~2.09 MiB, ConvMLP-M)",
            f"trace time x{reg['time_scale']:.4g} ({reg['time_scale_source']})",
            f"chunks of {a.chunk_share:.2%} of the payload (the original's share: 1000 of 33,307 rows)",
            f"trace rates x{reg['rate_scale']:.4g} ({reg['rate_scale_source']})",
        ]
    from rog.device.choice import resolve_device

    try:  # the devices of a hosts file resolve it themselves
        device = a.device if testbed == "hosts" else resolve_device(a.device)
    except ValueError as e:
        raise ConfigError(f"{e}") from None
    # every key is documented once, at its field in rog.experiment.run_config (the order: run_config._KEYS)
    cfg = dict(
        version=CONFIG_VERSION, testbed=testbed, testbed_requested=requested, fallback_reason=fallback,
        library=a.library, device=device, device_requested=a.device, threshold=threshold,
        policy_options=SO.chosen_policy_options(a), workers=a.workers, iterations=iterations,
        time_budget_s=a.time_budget_s, epoch=a.epoch, batch_multiple=a.batchsize, base_batch=wl_cfg["base_batch"],
        seed=a.seed, control=control, item=a.item, trace=trace_info,
        replay_mode=a.replay_mode if trace is not None else None, time_scale=reg["time_scale"],
        rate_scale=reg["rate_scale"], worker_offsets_s=offsets, shape=a.shape, cap_mbit=a.cap_mbit,
        cap_applied=a.cap_mbit is not None and testbed == "emulated",  # the loopback fallback has no cap
        rate_mbit=a.rate_mbit, link_delay_ms=resolved_link_delay_ms(a), compute_s=compute_s,
        compute_ratios=ratios, compute_model=compute_model,
        stream=STO.resolve(a, compute_s, wl_cfg["base_batch"] * a.batchsize) if hasattr(a, "stream_rate") else None,
        schedule=SCH.resolve(a, compute_s, device) if hasattr(a, "schedule") else None,
        pacing=SCH.resolve_pacing(a, device), run_semantics=RUN_SEMANTICS, profile=profile.name,
        ps_profile=ps_profile.name, regime=reg, compression=a.compression,
        **TO.config_entries(a),  # compression_options, partition, inject
        chunk_share=a.chunk_share, lr=a.lr if a.lr is not None else wl_cfg["default_lr"],
        momentum=0.9, weight_decay=5e-4,  # DEFSGDM's Nesterov momentum and weight decay
        eval_every=a.eval_every, global_eval_every_s=getattr(a, "global_eval_every_s", None),
        faults=dataclasses.asdict(options_from(a, FaultOptions, "faults")),
        checkpoint=dict(every_s=a.checkpoint_every_s, triple_every=a.checkpoint_triple_every,
                        time_scale=reg["time_scale"],  # the period is scaled like trace time
                        workers=a.checkpoint_workers),
        model=wl_cfg["model"], workload=wl_cfg["workload"],
        **wl_cfg["entries"],  # the workload's own (WORKLOADS[name].entries; cruda: data_dir, train/test files, ...)
        note=a.note, flags=getattr(a, "flag_values", None),
        cache_dir=str(cache_dir),
    )
    if testbed == "hosts":
        hf = a.hosts_file
        cfg["hosts"] = dict(  # the real devices (rog.deploy); no secret, no key material
            file=str(Path(a.hosts).resolve()), ps=hf.ps.name,
            workers=[h.name for h in hf.workers], port=a.port or DEFAULT_PS_PORT,  # worker k = workers[k]
            devices={h.name: dict(rank=h.rank, target=h.target, device_profile=h.device_profile, interface=h.interface,
                                  runtime=h.runtime, image=h.image, batch_size=h.batch_size, replay=h.replay.direction)
                     for h in hf.hosts},
            pacing=pacing)  # per worker: its profile, paced or at its own speed (rog.experiment.host_pacing)
    if testbed == "emulated":
        from rog.experiment.emulated import EmulatedNetwork

        net = EmulatedNetwork(a.workers, cap_mbit=a.cap_mbit, shape=a.shape)  # names and addresses only
        cfg["emulated"] = dict(prefix=net.prefix, subnet=str(net.testbed.subnet), hosts=net.hosts())
        if getattr(a, "tcp_slow_start_after_idle", None) == "off":  # absent: the kernel's default, on
            cfg["emulated"][SLOW_START_KEY] = "off"  # (rog.experiment.run_config.slow_start_after_idle reads it)
    cfg["run_id"] = run_id(cfg)
    if registry.has_own_runtime(cfg["library"]):  # DDP: its own checks (rog.baselines.ddp)
        from rog.baselines.ddp import check_ddp_config

        check_ddp_config(RunConfig.from_dict(cfg, source="run.py flags"))  # a DDPConfigError is a ConfigError
    return cfg


def resolve(a: argparse.Namespace) -> RunConfig:
    """The run's typed configuration (:class:`~.run_config.RunConfig`) of parsed ``run.py`` arguments."""
    return RunConfig.from_dict(resolve_config(a), source="run.py flags")


def run_id(cfg: dict) -> str:
    """``<system><threshold>-<control>[-<replay mode>][-<workload>]-b<multiple>-w<workers>-seed<seed>[-<note>]``,
    e.g. ``ROG4-outdoors-artifact-b1-w4-seed0`` or ``BSP-none-b1-w4-seed0`` (unshaped: no replay mode);
    the workload appears only when it is not the quick one."""
    from rog.policies.registry import run_id_system

    parts = [run_id_system(cfg["library"], cfg["threshold"]), str(cfg["control"])]
    if cfg.get("replay_mode"):
        parts.append(cfg["replay_mode"])
    if cfg.get("workload", "quick") != "quick":
        parts.append(cfg["workload"])
    rid = "-".join(parts) + f"-b{cfg['batch_multiple']}-w{cfg['workers']}-seed{cfg['seed']}"
    note = "".join(c if c.isalnum() or c in "-_." else "_" for c in cfg["note"])
    return f"{rid}-{note}" if note else rid


