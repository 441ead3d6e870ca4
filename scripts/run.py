#!/usr/bin/env python
"""Run one experiment: a parameter server and N workers as processes on this machine.

    python scripts/run.py --testbed emulated --library BSP -c outdoors --iterations 50
    python scripts/run.py --testbed loopback --library ROG --threshold 4 --iterations 300

Testbed ``emulated`` (the default when run as root and ``ip netns`` works): one network namespace
per device (:mod:`rog.experiment.emulated`, :class:`rog.testbed.netns.Testbed` with a run-specific
prefix), the parameter server inside the PS namespace (bound to 0.0.0.0), every worker inside its own
namespace (the worker host forks one process per worker, and each enters its namespace with
``setns`` before opening a socket), and ``tc`` replaying each worker's trace on its link: uplink
(worker end's egress) and, with ``--shape both`` (default), downlink (PS end's egress; the original
artifact left it unshaped: ``--shape uplink``).  The testbed is destroyed on completion, Ctrl-C,
SIGTERM/SIGHUP and failure, and the run checks that nothing with its prefix is left.  Without root
or working namespaces it falls back, with a warning, to loopback with the transport's token bucket
following the same per-worker schedules (worker side for pushes, PS side per connection for pulls).

Testbed ``loopback``: every process talks over 127.0.0.1; links are shaped, if at all, by the
transport's own token bucket (``--rate-mbit``, each direction of each worker link, or a trace with
``-c``), not by ``tc``.  Its default is ``-c none``.  Unshaped (``-c none``) runs are not paced unless
``--profile`` or ``--compute-s`` asks; trace runs are.  ``--rate-mbit R`` (constant rate) implies
``-c none`` and shapes with ``tc`` on the emulated testbed.

Testbed ``hosts`` (real devices, :mod:`rog.deploy`): ``--hosts FILE`` names the parameter server
and the workers (``configs/hosts.example.yaml``; the worker count comes from the file; per host
``runtime: native`` or ``docker``).  ``--dry-run`` prints the run's plan (hosts, every command, every
file) without connecting anywhere or writing the run folder.  Without it the plan runs with Fabric
(:class:`rog.deploy.fabric_runner.FabricRunner`, key-based SSH): ``--child prepare`` here writes the
model layout and pre-trains once, then every host gets the code (content-addressed tarball),
``config.yaml``, ``layout.json``, the weights and the trace; the PS (``--child ps``) starts first,
then the trace replays (``scripts/tc_replay.py``, held), the power samplers (real devices only: the
emulated devices' energy is the state model, computed afterwards as with the local launcher) and the workers
(``--child worker``); once every worker wrote ``worker.ready`` the launcher writes ``links.ready`` on
every host, releasing replays and training together.  A live progress line (iterations, worker 0's
accuracy, stall share, ETA) follows the remote event logs, which are mirrored into the run folder as
they grow; on completion, Ctrl-C, SIGTERM or any failure every remote process is stopped and every
host's run folder is copied back into ``hosts/<host>/`` (event, replay and power logs also into the
run folder).

Launchers (``--launcher``): ``fabric`` drives the emulated testbed through the SAME path as real
devices, with one private sshd per namespace (:class:`rog.experiment.emulated.EmulatedHosts`); it is
the default when sshd is installed (else ``local`` with a warning: ``bash scripts/setup_sshd.sh``
installs it).  ``local`` forks the processes here (below); loopback runs always use it.

Traces and regime (:mod:`rog.experiment.traceplan`): ``-c outdoors|indoors`` picks the full record
in ``data/bw_records/`` if downloaded, else ``../shared/traces/outdoors-w1.csv`` (outdoors), else
the synthetic ``configs/traces/<control>-synth.csv``; ``--trace FILE`` overrides, ``-c none`` is
unshaped.  Every worker replays the trace from its own offset (default evenly spread); the replays
start when the worker host is ready to connect (``workers.ready`` -> ``links.ready``), so training
meets the traces at the configured offsets whatever the start-up took.  Defaults
keep the paper's two ratios (DESIGN 3.3): compute is paced to the device profile's time
(``--profile``, default quick-cpu: 0.28 s), trace time is scaled by compute_s / 1.12 s (a sample
lasts half an iteration), and rates are scaled so the full 1-bit push takes ``--regime-ratio``
(0.3) of compute time at the trace's mean rate.  ``--time-scale`` / ``--rate-scale`` replace the
derived scales (the shared traces are already at the artifact's replayed 0.7x; the raw records are
not: ``--rate-scale 0.7`` replays them as the artifact did, without the regime).  Every choice and
the ratios reached are in ``config.yaml`` (``regime``).

Workload (``--workload``, :mod:`rog.workloads.registry`, recorded in ``config.yaml`` so every child
and ``scripts/test_checkpoints.py`` rebuild the same one): ``quick`` (default;
:class:`rog.workloads.QuickWorkload`: the quick ConvMLP pre-trained on clean digits, adapted on noisy
non-IID worker shards) or ``cruda`` (the paper's: ConvMLP-M at 224 px on noisy Fed-CIFAR100 HDF5 from
``--data-dir``, batch from the device profile, default ``jetson-xavier-nx``: 24; learning rate 1e-6;
pre-trained weights from ``--weights`` or ``<data-dir>/convmlp_m_cifar100.pth``, refused when
missing unless ``--random-init``; ``scripts/smoke_full.py`` runs it on generated data).  Flags follow the original artifact
(``--library``, ``--threshold``, ``-b/--batchsize`` as a multiple of the base batch, done as gradient
accumulation with compute paced to ``b`` times the profile's time while the links keep the x1
regime, ``-e/--epoch``, ``-n/--note``, ``-c/--control``).

``--library DDP`` (:mod:`rog.baselines.ddp`): the reference a user would otherwise pick, plain
``DistributedDataParallel`` over gloo with float32 gradients all-reduced every iteration (same
workload, split, seeds, SGD rule and rate as the ROG workers; ``--compression`` only sets the
regime's rate scale, so the links are those of a BSP run).  The PS process hosts the rendezvous
only; on the emulated testbed it forwards between the worker links, so the ring crosses every
shaped link like a hotspot (:mod:`rog.baselines.netpath`).  On loopback it runs unshaped only.

Writes ``<result-dir>/<run-id>/``: ``config.yaml`` (the resolved config), ``events-ps.jsonl`` and
``events-w<k>.jsonl`` (:mod:`rog.runtime.events`), ``metrics.csv`` (worker 0 tests the model it
holds at iteration 0, every ``--eval-every`` iterations and at the end; after the final flush it
tests once more, reported as ``flushed_accuracy``), replay logs ``replay-w<k>-up.csv`` /
``replay-w<k>-down.csv`` (``t_s`` on the event clock), ``tracking.json`` (does communication time
follow the replayed rate: :mod:`rog.experiment.tracking`), ``energy.json`` and ``power-<rank>.csv``
(the state model per device, labelled ``model:<profile>``), ``checkpoints/`` (:mod:`rog.checkpoint`:
the model each ``--checkpoint-workers`` worker holds at iteration 0, every ``--checkpoint-every-s``
seconds times the trace time scale, the period tripling after every ``--checkpoint-triple-every``
checkpoints, and at the last iteration; ``scripts/test_checkpoints.py`` tests them), ``manifest.json`` (code version, hosts,
trace checksum, command line, start/end, exit status), per-process logs, and ``DONE`` on success
or ``INCOMPLETE`` (with the reason) on failure, Ctrl-C or SIGTERM; partial results are kept and
every child process is killed on exit.  The last line printed is a JSON summary.

Processes (``--launcher local``): the launcher (no torch after configuration), the parameter server
(no torch), and a worker host that imports torch and builds the workload once, then forks one process
per worker (on a 2-core machine the imports cost seconds of CPU per process).  With ``--launcher
fabric`` every worker is its own process importing torch (as on real devices), so the ready gate
above keeps the links from starting before the slowest worker is ready.

The shared secret is generated per run and reaches the children only through their environment
(``ROG_SECRET``).  ``--serve-only`` starts just the parameter server on loopback (secret from your
``ROG_SECRET``) for workers you start yourself, e.g. ``examples/adapt_quick.py --server``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from rog.experiment.emulated import SHAPES  # noqa: E402
from rog.experiment import RUN_SEMANTICS  # noqa: E402
from rog.experiment import sync_options as SO  # noqa: E402 - torch-free
from rog.chunks import ARTIFACT_CHUNK_SHARE, chunk_bytes_for_share  # noqa: E402
from rog.experiment.traceplan import CONTROLS, DEFAULT_REGIME_RATIO  # noqa: E402
from rog.traces import REPLAY_MODES  # noqa: E402
from rog.workloads.registry import WORKLOADS  # noqa: E402 - torch-free

LIBRARIES = ("BSP", "SSP", "FLOWN", "ROG", "ADSP", "ADACOMM", "DDP")  # DDP: the torch.distributed gloo baseline (rog.baselines.ddp)
TESTBEDS = ("emulated", "loopback", "hosts")
LAUNCHERS = ("fabric", "local")  # fabric: rog.deploy over SSH (hosts, emulated with sshd); local: forked children
WORKER_READY_FILE = "worker.ready"  # --launcher fabric: a worker is ready to connect (imports done, data loaded)
GO_FILE = "links.ready"  # the launcher's go: links replay and workers connect (also the local path's file)
DEFAULT_WORKERS = 4  # workers when neither --workers nor a hosts file decides
DEFAULT_PS_PORT = 29500  # the parameter server's port on real devices (--testbed hosts) unless --port
DEFAULT_PROFILE = "quick-cpu"  # workers: an emulated Jetson Xavier NX at a quarter of its compute time
MODEL = "convmlp_quick"  # the quick profile's model (rog.models)
BASE_BATCH = 32  # samples per mini-batch; -b multiplies it by gradient accumulation
DEFAULT_ITERATIONS = 300  # iterations per worker when neither --iterations nor --epoch is given
BUDGET_ITERATION_CAP = 1_000_000  # --time-budget-s without --iterations: the budget ends the run, not a count
DEFAULT_LR = 5e-5  # help text only: the default lr comes from rog.workloads.registry (quick 5e-5, CRUDA 1e-6)
DEFAULT_EVAL_EVERY = 25  # worker 0 tests its model every this many iterations
JOIN_TIMEOUT_S = 900.0  # how long the PS waits for every worker to connect (a loaded 2-core machine
# starting four torch processes over Fabric can take minutes; a crashed start still fails, only later)
BURST_BYTES = 2048  # token-bucket burst when --rate-mbit shapes links: small against a quick push (~27 KB), so
# measured transfer times (ROG's MTA time, FLOWN's bandwidth estimate) follow the rate, not the burst


# ----------------------------------------------------------------------------- configuration
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--testbed", choices=TESTBEDS, default=None,
                   help="where the processes run: emulated = one network namespace per device with tc trace replay "
                        "(default; falls back to loopback with a warning without root), loopback = 127.0.0.1, "
                        "hosts = real devices over SSH from --hosts FILE")
    p.add_argument("--hosts", default=None, help="hosts file of --testbed hosts (see configs/hosts.example.yaml)")
    p.add_argument("--dry-run", action="store_true",
                   help="--testbed hosts: print the deployment plan (hosts, commands, files) and exit without connecting")
    p.add_argument("--launcher", choices=LAUNCHERS, default=None,
                   help="how the processes start: fabric = deployed over SSH with Fabric, on the emulated testbed through "
                        "one sshd per namespace (default when sshd is installed; always on --testbed hosts); local = "
                        "forked on this machine (default on loopback, and on the emulated testbed without sshd)")
    p.add_argument("-c", "--control", choices=CONTROLS, default=None,
                   help="bandwidth trace to replay: outdoors, indoors or none (unshaped); default outdoors on the "
                        "emulated testbed, none on --testbed loopback or with --rate-mbit ('custom' with --trace)")
    p.add_argument("--trace", default=None, help="trace file to replay instead of the control's default (t_s,mbps CSV or 'seconds Mbps' record)")
    p.add_argument("--replay-mode", choices=REPLAY_MODES, default="recorded",
                   help="recorded = the samples as recorded (default); artifact = the original's extra 10-90 s holds")
    p.add_argument("--time-scale", type=float, default=None, help="trace time multiplied by this (default: compute_s / 1.12 s, see --regime-ratio)")
    p.add_argument("--rate-scale", type=float, default=None,
                   help="trace rates multiplied by this (default: derived from --regime-ratio; 1.0 = the file's rates)")
    p.add_argument("--chunk-share", type=float, default=ARTIFACT_CHUNK_SHARE,
                   help="chunk size as a fraction of the model's full payload: the unit a cut transmission "
                        f"delivers or drops (default {ARTIFACT_CHUNK_SHARE:.4f}: the original's 1000 of 33,307 rows)")
    p.add_argument("--regime-ratio", type=float, default=DEFAULT_REGIME_RATIO,
                   help=f"when --rate-scale is not given: full push time at the trace's mean rate / compute time (default {DEFAULT_REGIME_RATIO}, the paper's)")
    p.add_argument("--worker-offsets", default=None, help="comma-separated trace start offsets in trace seconds, one per worker (default: evenly spread)")
    p.add_argument("--shape", choices=SHAPES, default="both", help="shape the uplink only (as the original) or both directions (default)")
    p.add_argument("--cap-mbit", type=float, default=None, help="shared-channel cap on the aggregate uplink at the PS (emulated testbed)")
    p.add_argument("--profile", default=None, help="workers' device profile for compute pacing and the power model (default quick-cpu)")
    p.add_argument("--ps-profile", default="laptop", help="the parameter server's device profile for the power model (default laptop, as in the paper)")
    p.add_argument("--item", default=None, help="evaluation item this run belongs to (recorded in config.yaml for the analysis)")
    p.add_argument("--library", type=str.upper, choices=LIBRARIES, default="ROG", help="synchronisation system (default ROG)")
    p.add_argument("--threshold", type=int, default=None, help="staleness threshold s (default: the system's, ROG/SSP/FLOWN 4, BSP 0)")
    p.add_argument("-b", "--batchsize", type=int, default=1, help=f"batch size as a multiple of the base batch {BASE_BATCH} (default 1)")
    p.add_argument("-e", "--epoch", type=float, default=None, help="run until the worker with the smallest shard has seen this many epochs")
    p.add_argument("-n", "--note", default="", help="free text appended to the run id")
    p.add_argument("--workers", type=int, default=None,
                   help=f"number of workers (default {DEFAULT_WORKERS}; --testbed hosts: the hosts file's workers)")
    p.add_argument("--iterations", type=int, default=None, help=f"iterations per worker (default {DEFAULT_ITERATIONS}; overrides --epoch)")
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="equal wall-clock budget: every worker stops at its first iteration boundary after this many "
                        "seconds from the start of the links (links.ready, one clock for all), then flushes; "
                        "--iterations (default: no cap) still caps the run")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, split, noise and sampling (default 0)")
    p.add_argument("--rate-mbit", type=float, default=None, help="token-bucket rate per link and direction in Mbit/s (default: no limit)")
    p.add_argument("--compression", choices=["sign", "none"], default="sign", help="sign = DEFSGDM 1-bit (default), none = float32")
    p.add_argument("--lr", type=float, default=None,
                   help=f"worker learning rate (default: the workload's, quick {DEFAULT_LR}, cruda 1e-6 as Table II)")
    p.add_argument("--workload", choices=WORKLOADS, default="quick",
                   help="quick = digits, no download (default); cruda = the paper's ConvMLP-M at 224 px on noisy "
                        "Fed-CIFAR100 HDF5 (--data-dir), batch from the device profile (--profile, default jetson-xavier-nx)")
    p.add_argument("--data-dir", default=None,
                   help="cruda: folder with mixed_fed_cifar100_{train,test}.h5 (default data/; utils/download_data.sh "
                        "or python -m data_gen.make_tiny_fedcifar)")
    p.add_argument("--weights", default=None,
                   help="cruda: pre-trained ConvMLP-M CIFAR-100 state_dict (default <data-dir>/convmlp_m_cifar100.pth)")
    p.add_argument("--random-init", action="store_true",
                   help="cruda without weights: start from a seeded RANDOM initialisation (smoke runs only, not the paper)")
    p.add_argument("--test-limit", type=int, default=None,
                   help="cruda: worker 0 tests on a seeded subset of this many test images (default: the whole test file)")
    p.add_argument("--split", default=None,
                   help="cruda: non-IID split label_sorted (default, the artifact's), pachinko, dirichlet or iid")
    p.add_argument("--eval-every", type=int, default=DEFAULT_EVAL_EVERY, help=f"test worker 0's model every this many iterations (default {DEFAULT_EVAL_EVERY})")
    p.add_argument("--checkpoint-every-s", type=float, default=60.0,
                   help="checkpoint the model a worker holds every this many seconds, times the trace time scale "
                        "(the artifact: 60 s); 0 = only at the start and the end")
    p.add_argument("--checkpoint-triple-every", type=int, default=20,
                   help="triple the checkpoint period after every this many checkpoints (the artifact: 20)")
    p.add_argument("--checkpoint-workers", default="0",
                   help="workers that write checkpoints: comma-separated indices or 'all' (default 0)")
    p.add_argument("--compute-s", type=float, default=None, help="compute pacing: each iteration's compute takes at least this long (default: none)")
    p.add_argument("--result-dir", default="result", help="parent directory of run directories (default result/)")
    p.add_argument("--cache-dir", default=None, help="where pre-trained weights are cached (default <result-dir>/.cache)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing completed run directory")
    p.add_argument("--no-progress", action="store_true", help="no live progress line")
    p.add_argument("--serve-only", action="store_true", help="start only the parameter server (ROG_SECRET from your environment)")
    p.add_argument("--port", type=int, default=0, help="parameter-server port (default: any free port)")
    p.add_argument("--evict-after-s", type=float, default=60.0,
                   help="a worker whose link broke still counts in the staleness gate this long, then it is evicted "
                        "(warning event) so the others continue; it may rejoin later (default 60; 0 = at once)")
    p.add_argument("--ps-checkpoint-every-s", type=float, default=60.0,
                   help="the parameter server checkpoints its state (<run>/ps-checkpoints/) every this many seconds, "
                        "so it can be restarted with --resume-ps (default 60; 0 = never)")
    p.add_argument("--resume-ps", action="store_true",
                   help="--child ps: restart the parameter server from its latest checkpoint in the run folder; "
                        "workers reconnect and re-send what the checkpoint lacks")
    p.add_argument("--reconnect-timeout-s", type=float, default=600.0,
                   help="a worker whose link broke reconnects with backoff for up to this long (default 600; 0 = "
                        "a broken link ends the worker)")
    # internal: how the launcher starts its children
    p.add_argument("--child", choices=["ps", "workers", "worker", "prepare"], help=argparse.SUPPRESS)
    p.add_argument("--worker-id", type=int, default=None, help=argparse.SUPPRESS)  # --child worker
    p.add_argument("--ps-address", default=None, help=argparse.SUPPRESS)  # --child worker
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--origin", type=float, default=None, help=argparse.SUPPRESS)
    SO.add_arguments(p)  # --compute-ratios, --adsp-*
    a = p.parse_args(argv)
    a.hosts_file = None
    if a.testbed == "hosts" and a.child is None:
        if a.hosts is None:
            p.error("--testbed hosts needs --hosts FILE (copy configs/hosts.example.yaml and edit it)")
        from rog.deploy.hosts import HostsFileError, load_hosts

        try:
            a.hosts_file = load_hosts(a.hosts)
        except HostsFileError as e:
            p.error(f"--hosts: {e}")
        n = a.hosts_file.n_workers
        if a.workers is not None and a.workers != n:
            p.error(f"--workers {a.workers} differs from the {n} worker(s) in {a.hosts}; drop --workers")
        a.workers = n
    elif a.hosts is not None and a.child is None:
        p.error("--hosts is for --testbed hosts; add --testbed hosts or drop --hosts")
    if a.workers is None:
        a.workers = DEFAULT_WORKERS
    if a.child == "worker" and (a.worker_id is None or a.worker_id < 0 or not a.ps_address or not a.port):
        p.error("--child worker needs --worker-id K (>= 0), --ps-address ADDRESS and --port PORT")
    checks = [
        (not (a.dry_run and a.testbed != "hosts"), "--dry-run prints a deployment plan: it needs --testbed hosts --hosts FILE"),
        (not (a.testbed == "hosts" and a.serve_only), "--serve-only runs the parameter server on loopback; drop --testbed hosts"),
        (a.workers >= 1, "--workers must be >= 1"),
        (a.batchsize >= 1, "-b/--batchsize must be a positive multiple (1, 2, 4, ...)"),
        (a.iterations is None or a.iterations >= 1, "--iterations must be >= 1"),
        (a.time_budget_s is None or (a.time_budget_s > 0 and math.isfinite(a.time_budget_s)),
         "--time-budget-s must be a positive number of seconds"),
        (a.epoch is None or a.epoch > 0, "-e/--epoch must be positive"),
        (a.threshold is None or a.threshold >= 0, "--threshold must be >= 0"),
        (a.rate_mbit is None or (a.rate_mbit > 0 and math.isfinite(a.rate_mbit)), "--rate-mbit must be a positive number"),
        (a.lr is None or (a.lr > 0 and math.isfinite(a.lr)), "--lr must be a positive number"),
        (a.eval_every >= 1, "--eval-every must be >= 1"),
        (a.compute_s is None or a.compute_s >= 0, "--compute-s must be >= 0"),
        (a.checkpoint_every_s >= 0 and math.isfinite(a.checkpoint_every_s),
         "--checkpoint-every-s must be a number >= 0 (0: checkpoints at the start and the end only)"),
        (a.checkpoint_triple_every >= 1, "--checkpoint-triple-every must be >= 1"),
        (a.evict_after_s >= 0 and math.isfinite(a.evict_after_s), "--evict-after-s must be a number of seconds >= 0"),
        (a.ps_checkpoint_every_s >= 0 and math.isfinite(a.ps_checkpoint_every_s),
         "--ps-checkpoint-every-s must be a number of seconds >= 0 (0: no PS checkpoints)"),
        (a.reconnect_timeout_s >= 0 and math.isfinite(a.reconnect_timeout_s),
         "--reconnect-timeout-s must be a number of seconds >= 0 (0: no reconnect)"),
        (a.time_scale is None or (a.time_scale > 0 and math.isfinite(a.time_scale)), "--time-scale must be a positive number"),
        (a.rate_scale is None or (a.rate_scale > 0 and math.isfinite(a.rate_scale)), "--rate-scale must be a positive number"),
        (a.regime_ratio > 0 and math.isfinite(a.regime_ratio), "--regime-ratio must be a positive number"),
        (0 < a.chunk_share <= 1, "--chunk-share must lie in (0, 1] (a fraction of the model's payload, e.g. 0.03)"),
        (a.cap_mbit is None or (a.cap_mbit > 0 and math.isfinite(a.cap_mbit)), "--cap-mbit must be a positive number"),
        (not (a.rate_mbit is not None and a.control in ("outdoors", "indoors")),
         "--rate-mbit (a constant rate) and -c outdoors/indoors (a trace) exclude each other; choose one"),
        (not (a.trace is not None and a.control == "none"), "--trace needs a shaped control: drop -c none"),
        (not (a.serve_only and a.testbed == "emulated"), "--serve-only runs the parameter server on loopback; drop --testbed emulated"),
        (0 <= a.port <= 65535, "--port must lie in [0, 65535]"),
        (a.seed >= 0, "--seed must be >= 0"),
    ]
    for ok, msg in checks:
        if not ok:
            p.error(msg)
    a.checkpoint_workers = _parse_checkpoint_workers(p, a.checkpoint_workers, a.workers)
    try:
        a.compute_ratios = SO.parse_ratios(a.compute_ratios, a.workers)
        a.adsp = SO.resolve_adsp(a)
    except SO.OptionError as e:
        p.error(str(e))
    return a


def _parse_checkpoint_workers(p: argparse.ArgumentParser, text: str, n_workers: int) -> list[int]:
    """--checkpoint-workers: 'all' or comma-separated worker indices in [0, n_workers), sorted, unique."""
    if text.strip() == "all":
        return list(range(n_workers))
    try:
        ks = sorted({int(w) for w in text.split(",") if w.strip()})
    except ValueError:
        p.error(f"--checkpoint-workers must be comma-separated worker indices or 'all'; got {text!r}")
    if not ks:
        p.error("--checkpoint-workers must name at least one worker (e.g. 0) or 'all'")
    if any(not 0 <= k < n_workers for k in ks):
        p.error(f"--checkpoint-workers must lie in [0, {n_workers}) (--workers {n_workers}); got {text!r}")
    return ks


def _resolve_workload(a: argparse.Namespace) -> dict:
    """--workload and its flags -> model, base batch, default lr and profile, plus the cruda config keys
    (``cruda``: empty for quick); exits with the registry's message (missing data, missing weights)."""
    from rog.testbed.profiles import ProfileError, load_profile
    from rog.workloads.registry import DEFAULTS, WorkloadConfigError, resolve_workload

    profile_name = a.profile or DEFAULTS[a.workload].profile
    try:
        batch = load_profile(profile_name).batch_size if a.workload == "cruda" else None
        wl = resolve_workload(a.workload, profile_batch_size=batch, data_dir=a.data_dir, weights=a.weights,
                              random_init=a.random_init, test_limit=a.test_limit, split=a.split, root=ROOT)
    except (WorkloadConfigError, ProfileError) as e:
        raise SystemExit(f"run.py: error: --workload {a.workload}: {e}") from None
    base = {k: wl.pop(k) for k in ("workload", "model", "base_batch", "default_lr")}
    return dict(base, profile=profile_name, cruda=wl)


def paced_compute_s(base_compute_s: float | None, batch_multiple: int, explicit: bool = False) -> float | None:
    """Compute time to pace one iteration to: the profile's time for one mini-batch times ``-b`` (the
    paper's batch item: "the computation time proportionally increased"); an explicit ``--compute-s``
    is per iteration and taken as given."""
    if base_compute_s is None or explicit:
        return base_compute_s
    return base_compute_s * int(batch_multiple)


def resolve_config(a: argparse.Namespace) -> dict:
    """The full configuration of the run (saved as config.yaml; children read only this)."""
    from rog.experiment import traceplan as TP
    from rog.policies import make_policy
    from rog.testbed.profiles import ProfileError, load_profile

    try:
        threshold = (a.threshold or 0) if a.library == "DDP" else make_policy(a.library, a.threshold).threshold
    except ValueError as e:
        raise SystemExit(f"run.py: error: --threshold: {e}") from None
    wl_cfg = _resolve_workload(a)
    iterations = a.iterations
    if iterations is None and a.epoch is not None:
        from rog.workloads.registry import make_workload

        smallest = min(s.size for s in make_workload(dict(wl_cfg, seed=a.seed, workers=a.workers,
                                                          cache_dir=a.cache_dir or _cache(a.result_dir))).shards)
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
    if a.control is not None:
        control = a.control
    elif a.trace is not None:
        control = "custom"  # a user's trace without a label
    else:  # a constant --rate-mbit, or an explicit loopback, means no trace
        control = "none" if requested == "loopback" or a.rate_mbit is not None else "outdoors"

    try:
        profile = load_profile(a.profile or wl_cfg["profile"])
        ps_profile = load_profile(a.ps_profile)
    except ProfileError as e:
        raise SystemExit(f"run.py: error: --profile/--ps-profile: {e}") from None
    if a.compute_ratios is None and profile.compute_ratios:  # the profile's team speeds, unless the flag is given
        try:
            a.compute_ratios = SO.parse_ratios(list(profile.compute_ratios), a.workers,
                                               source=f"--profile {profile.name}: compute_ratios")
        except SO.OptionError as e:
            raise SystemExit(f"run.py: error: {e}") from None
    paced = control != "none" or a.profile is not None or a.compute_ratios is not None  # unshaped runs stay unpaced
    base_compute_s = a.compute_s if a.compute_s is not None else (profile.compute_s_per_iteration if paced else None)
    compute_s = paced_compute_s(base_compute_s, a.batchsize, explicit=a.compute_s is not None)

    trace_info, trace, offsets = None, None, None
    if control == "none" and a.worker_offsets is not None:
        raise SystemExit("run.py: error: --worker-offsets places each worker in a trace, but this run replays none "
                         "(-c none or --rate-mbit); drop it, or choose -c outdoors|indoors or --trace FILE")
    if control != "none":
        from rog.traces import load_trace

        try:
            path, kind = (Path(a.trace).resolve(), "user") if a.trace else TP.default_trace(control)
            trace = load_trace(path)
            offsets = TP.parse_offsets(a.worker_offsets, a.workers, trace.duration_s)
        except ValueError as e:
            raise SystemExit(f"run.py: error: {'--trace' if a.trace else '-c/--control'}: {e}") from None
        except OSError as e:
            raise SystemExit(f"run.py: error: --trace: cannot read {a.trace or path}: {e.strerror}; give an existing "
                             "trace file (t_s,mbps CSV or 'seconds Mbps' records)") from None
        trace_info = dict(path=str(path), kind=kind, sha256=TP.sha256_file(path), duration_s=trace.duration_s,
                          mean_mbit=trace.mean_mbit, samples=trace.n_samples)
    payload = (_full_push_bytes(a.compression, a.cache_dir or _cache(a.result_dir), wl_cfg["model"], a.chunk_share)
               if trace is not None else 0)
    from rog.experiment.tracking import WIRE_FACTOR

    reg = TP.regime(trace=trace, compute_s=base_compute_s, payload_bytes=payload, wire_factor=WIRE_FACTOR,
                    replay_mode=a.replay_mode, ratio=a.regime_ratio, time_scale=a.time_scale,
                    rate_scale=a.rate_scale, seed=a.seed)
    if trace is not None:
        reg["changed"] = [
            f"compute time {base_compute_s:g} s per mini-batch (paper {TP.PAPER['compute_s']} s; profile {profile.name})"
            + (f", {compute_s:g} s per iteration of {a.batchsize} mini-batches (links keep the x1 regime)"
               if compute_s != base_compute_s else ""),
            f"payload {payload} B per direction ({wl_cfg['model']}, {a.compression}; the paper: ~2.09 MiB, ConvMLP-M)",
            f"trace time x{reg['time_scale']:.4g} ({reg['time_scale_source']})",
            f"chunks of {a.chunk_share:.2%} of the payload (the original's share: 1000 of 33,307 rows)",
            f"trace rates x{reg['rate_scale']:.4g} ({reg['rate_scale_source']})",
        ]
    cfg = dict(
        testbed=testbed,  # emulated (namespaces + tc) or loopback (127.0.0.1, transport token bucket)
        testbed_requested=requested,  # what was asked for
        fallback_reason=fallback,  # why the emulated testbed fell back to loopback (None: it did not)
        library=a.library,  # BSP, SSP, FLOWN or ROG
        threshold=threshold,  # staleness threshold s
        workers=a.workers,  # number of worker processes
        iterations=iterations,  # iterations per worker (with time_budget_s: a cap)
        time_budget_s=a.time_budget_s,  # stop at the first iteration boundary this long after links.ready (None: off)
        epoch=a.epoch,  # requested epochs (None: --iterations or the default decided)
        batch_multiple=a.batchsize,  # -b: mini-batches accumulated per iteration
        base_batch=wl_cfg["base_batch"],  # samples per mini-batch (quick 32; cruda: the device profile's batch_size)
        seed=a.seed,  # data, split, noise, sampling, artifact replay holds
        control=control,  # outdoors, indoors or none (unshaped)
        item=a.item,  # evaluation item (analysis label)
        trace=trace_info,  # path, kind (record/shared/synthetic/user), sha256, duration, mean (None: unshaped)
        replay_mode=a.replay_mode if trace is not None else None,  # recorded or artifact
        time_scale=reg["time_scale"],  # wall seconds per trace second
        rate_scale=reg["rate_scale"],  # factor on every trace rate
        worker_offsets_s=offsets,  # trace second each worker's replay starts at (event rank order), when the workers are ready
        shape=a.shape,  # uplink only, or both directions
        cap_mbit=a.cap_mbit,  # shared-channel cap on the aggregate uplink (None: none)
        cap_applied=a.cap_mbit is not None and testbed == "emulated",  # the loopback fallback has no cap
        rate_mbit=a.rate_mbit,  # constant rate per link and direction (None: unshaped or a trace)
        compute_s=compute_s,  # compute pacing target per iteration: the profile's x -b (None: off)
        compute_ratios=a.compute_ratios,  # worker k paces to compute_s x compute_ratios[k] (None: all 1)
        adsp=a.adsp if a.library == "ADSP" else None,  # ADSP's scheduler options (rog.experiment.sync_options)
        run_semantics=RUN_SEMANTICS,  # what these flags measure with this code (run_all.sh reruns older runs)
        profile=profile.name,  # workers' device profile (pacing, power model)
        ps_profile=ps_profile.name,  # the parameter server's device profile (power model)
        regime=reg,  # the dimensionless ratios kept (DESIGN 3.3) and what was changed
        compression=a.compression,  # sign (DEFSGDM 1-bit) or none
        chunk_share=a.chunk_share,  # chunk payload / full payload: the unit a cut transmission delivers or drops
        lr=a.lr if a.lr is not None else wl_cfg["default_lr"],  # worker learning rate (constant over a quick run: milestones at 800.. are not reached)
        momentum=0.9,  # DEFSGDM Nesterov momentum
        weight_decay=5e-4,  # DEFSGDM weight decay
        eval_every=a.eval_every,  # worker 0 tests its model every this many iterations
        faults=dict(  # rog.runtime: surviving broken links, worker restarts and PS restarts (issue #7)
            evict_after_s=a.evict_after_s,  # a lost worker counts in the gate this long, then it is evicted
            ps_checkpoint_every_s=a.ps_checkpoint_every_s,  # PS state checkpoints for --resume-ps (0: none)
            reconnect_timeout_s=a.reconnect_timeout_s,  # workers reconnect with backoff this long (0: never)
        ),
        checkpoint=dict(  # rog.checkpoint: models the workers hold, in <run>/checkpoints/ (scripts/test_checkpoints.py)
            every_s=a.checkpoint_every_s,  # period before scaling (0: at the start and the end only)
            triple_every=a.checkpoint_triple_every,  # the period triples after every this many checkpoints
            time_scale=reg["time_scale"],  # the period is scaled like trace time (DESIGN 3.3)
            workers=a.checkpoint_workers,  # which workers write checkpoints
        ),
        model=wl_cfg["model"],  # rog.models name
        workload=wl_cfg["workload"],  # rog.workloads.registry: quick (digits) or cruda (Fed-CIFAR100, ConvMLP-M)
        **wl_cfg["cruda"],  # cruda only: data_dir, train/test files, weights, random_init, split, image_size, ...
        note=a.note,  # free text, part of the run id
        cache_dir=str(Path(a.cache_dir) if a.cache_dir else _cache(a.result_dir)),  # pre-trained weights cache
    )
    if testbed == "hosts":
        hf = a.hosts_file
        cfg["hosts"] = dict(  # the real devices (rog.deploy); no secret, no key material
            file=str(Path(a.hosts).resolve()), ps=hf.ps.name,
            workers=[h.name for h in hf.workers],  # worker k = workers[k]
            port=a.port or DEFAULT_PS_PORT)
    if testbed == "emulated":
        from rog.experiment.emulated import EmulatedNetwork

        net = EmulatedNetwork(a.workers, cap_mbit=a.cap_mbit, shape=a.shape)  # names and addresses only
        cfg["emulated"] = dict(prefix=net.prefix, subnet=str(net.testbed.subnet), hosts=net.hosts())
    cfg["run_id"] = run_id(cfg)
    if cfg["library"] == "DDP":
        from rog.baselines.ddp import DDPConfigError, check_ddp_config

        try:
            check_ddp_config(cfg)
        except DDPConfigError as e:
            raise SystemExit(f"run.py: error: {e}") from None
    return cfg


def _full_push_bytes(compression: str, cache_dir, model: str = MODEL, chunk_share: float | None = None) -> int:
    """Frame bytes of a full push of ``model`` in chunks of ``chunk_share`` of its payload.  Building
    the model imports torch (seconds of CPU), so the answer is cached in ``<cache_dir>/push-bytes.json``
    under the share and a hash of the code it depends on (models, rows, codec, chunking, wire format)."""
    import hashlib

    deps = sorted((ROOT / "rog" / "models").glob("*.py")) + [ROOT / "rog" / f for f in
                                                             ("rows.py", "compression.py", "chunks.py", "wire.py")]
    h = hashlib.sha256()
    for f in deps:
        h.update(f.read_bytes())
    key = f"{model}/{compression}/{chunk_share!r}/{h.hexdigest()[:16]}"
    path = Path(cache_dir) / "push-bytes.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return int(known[key])
    n = _count_push_bytes(compression, model, chunk_share)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps({**known, key: n}) + "\n")
    except OSError:
        pass
    return n


def _count_push_bytes(compression: str, model: str = MODEL, chunk_share: float | None = None) -> int:
    import torch

    from rog.compression import make_codec
    from rog.experiment.traceplan import full_push_bytes
    from rog.models import make_model
    from rog.rows import RowPartition
    from rog.workloads.registry import DEFAULTS

    classes = next(d.num_classes for d in DEFAULTS.values() if d.model == model)
    with torch.random.fork_rng(devices=[]):
        part = RowPartition.from_module(make_model(model, classes))
    return full_push_bytes(part, make_codec(compression), chunk_share)


def run_id(cfg: dict) -> str:
    """``<system><threshold>-<control>[-<replay mode>][-<workload>]-b<multiple>-w<workers>-seed<seed>[-<note>]``,
    e.g. ``ROG4-outdoors-artifact-b1-w4-seed0`` or ``BSP-none-b1-w4-seed0`` (unshaped: no replay mode);
    the workload appears only when it is not the quick one."""
    system = cfg["library"] if cfg["library"] in ("BSP", "DDP") else f"{cfg['library']}{cfg['threshold']}"
    parts = [system, str(cfg["control"])]
    if cfg.get("replay_mode"):
        parts.append(cfg["replay_mode"])
    if cfg.get("workload", "quick") != "quick":
        parts.append(cfg["workload"])
    rid = "-".join(parts) + f"-b{cfg['batch_multiple']}-w{cfg['workers']}-seed{cfg['seed']}"
    note = "".join(c if c.isalnum() or c in "-_." else "_" for c in cfg["note"])
    return f"{rid}-{note}" if note else rid


def _cache(result_dir) -> Path:
    return Path(result_dir) / ".cache"


# ----------------------------------------------------------------------------- children
def child_ps(a: argparse.Namespace) -> int:
    """The parameter server (no torch here: the layout comes from layout.json, written by the worker host)."""
    from rog.compression import make_codec
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime import EventLog, ParameterServer, events_file_name
    from rog.transport import Listener, TransportConfig, load_secret

    run_dir = Path(a.run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    if cfg["library"] == "DDP":  # the gloo baseline: the PS hosts only the rendezvous (rog.baselines.ddp)
        from rog.baselines.ddp import serve_rendezvous

        return serve_rendezvous(cfg, run_dir, a.port, a.origin)
    layout = json.loads(_wait_for(run_dir / "layout.json", "worker 0 to write the model layout").read_text())
    partition = RowPartition.from_shapes(zip(layout["names"], layout["shapes"]))
    # emulated: this process already runs inside the PS namespace; hosts: a real device; both: tc shapes
    emulated = cfg["testbed"] in ("emulated", "hosts")
    rate = cfg["rate_mbit"] if not emulated and cfg["shape"] == "both" else None
    config = TransportConfig(secret=load_secret(), rate_mbit_at=rate, burst_bytes=BURST_BYTES)
    host = "0.0.0.0" if emulated else "127.0.0.1"
    with Listener(host, a.port, config=config, worker_ids=set(range(cfg["workers"]))) as listener:
        _write_atomic(run_dir / "ps.port", str(listener.address[1]))
        source = listener
        if not emulated and cfg["trace"] is not None and cfg["shape"] == "both":  # fallback: downlinks follow the traces
            from rog.experiment.emulated import PerWorkerShaping

            source = PerWorkerShaping(listener, lambda: _fallback_rates(cfg, _links_ready(run_dir)["monotonic_s"]),
                                      BURST_BYTES)  # workers connect only after links.ready exists
        faults = cfg.get("faults", {})
        with EventLog(run_dir / events_file_name("ps"), "ps", cfg["run_id"], a.origin, append=a.resume_ps) as events:
            codec = make_codec(cfg["compression"])
            policy = make_policy(cfg["library"], cfg["threshold"], **SO.policy_options(cfg))
            global_loss = None
            if policy.scheduler_period_s is not None:  # ADSP: the scheduler reads the global model's loss (torch)
                from rog.experiment.global_loss import make_global_loss

                global_loss = make_global_loss(_fabric_host_config(cfg, run_dir))
            ps = ParameterServer(partition, cfg["workers"], policy, global_loss=global_loss,
                                 codec=codec, events=events, join_timeout_s=JOIN_TIMEOUT_S,
                                 evict_after_s=faults.get("evict_after_s", 0.0),
                                 # as every worker computes it; a config older than chunk_share: 32 KB
                                 chunk_bytes=chunk_bytes_for_share(codec.row_wire_bytes(partition),
                                                                   cfg.get("chunk_share")))
            _ps_faults(ps, run_dir, faults, a.resume_ps)
            ps.serve(source)
    return 0


def _ps_faults(ps, run_dir: Path, faults: dict, resume: bool) -> None:
    """--resume-ps: restore the latest PS checkpoint (recorded in ps-restarts.jsonl); start PS checkpoints."""
    from rog.runtime.ps_checkpoint import ps_checkpoint_dir

    if resume:
        info = ps.resume(ps_checkpoint_dir(run_dir))
        rec = dict(resumed_unix_s=time.time(), checkpoint=info["seq"], checkpoint_unix_s=info["wall_s"],
                   since_checkpoint_s=time.time() - info["wall_s"])
        with open(run_dir / "ps-restarts.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
    if faults.get("ps_checkpoint_every_s", 0) > 0:
        ps.start_checkpoints(ps_checkpoint_dir(run_dir), faults["ps_checkpoint_every_s"])


def _schedules(cfg: dict) -> dict:
    """Event rank -> the replay schedule of its link (None when the run is unshaped or constant-rate)."""
    if cfg["trace"] is None:
        return {}
    from rog.experiment.emulated import schedule_for
    from rog.experiment.traceplan import load_for_replay, replay_options

    trace = load_for_replay(cfg)
    return {k: schedule_for(trace, replay_options(cfg, k)) for k in range(cfg["workers"])}


def _fallback_rates(cfg: dict, start_monotonic_s: float) -> dict:
    """Loopback fallback: event rank -> rate_mbit_at callable following its schedule from ``start_monotonic_s``."""
    from rog.experiment.emulated import ScheduleRate

    return {k: ScheduleRate(sched, start_monotonic_s) for k, sched in _schedules(cfg).items()}


def _links_ready(run_dir: Path) -> dict:
    """Wait for the launcher's ``links.ready`` (written when the replays start): ``{"t_s", "monotonic_s"}``."""
    return json.loads(_wait_for(run_dir / "links.ready", "the launcher to start the links").read_text())


def child_workers(a: argparse.Namespace) -> int:
    """The worker host: imports torch and builds the workload once, then forks one process per worker.

    (Imports cost seconds of CPU per process on a small machine; forked workers share them.
    Each forked worker is a separate process with its own connection, log and event file.)
    """
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    wl = make_workload(cfg)
    write_layout(cfg, run_dir, wl)  # pre-trains once if the cache is cold
    _pay_lazy_imports()  # once here, shared by the forked workers
    emulated = cfg["testbed"] == "emulated"
    port = int(_wait_for(run_dir / "ps.port", "the parameter server to listen").read_text())
    # the links start replaying when the workers are ready to connect, so every run's training sees
    # its traces from the configured offsets, however long the start-up took
    _write_atomic(run_dir / "workers.ready", "1\n")
    links = _links_ready(run_dir)
    rates = _fallback_rates(cfg, links["monotonic_s"]) if not emulated else {}
    sys.stdout.flush()
    sys.stderr.flush()
    pids: dict[int, int] = {}
    for k in range(cfg["workers"]):
        pid = os.fork()
        if pid == 0:  # the worker process
            code = 1
            try:
                _set_pdeathsig()
                log = os.open(run_dir / f"w{k}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                if emulated:  # into this worker's namespace before any socket exists
                    from rog.experiment.emulated import enter_netns

                    host = cfg["emulated"]["hosts"][f"w{k}"]
                    enter_netns(host["netns"])
                    server, rate = (host["ps_address"], port), None
                else:
                    server, rate = ("127.0.0.1", port), rates.get(k, cfg["rate_mbit"])
                code = run_worker(k, cfg, run_dir, wl, server, rate, a.origin, stop_at_s=_budget_end(cfg, links))
            except BaseException:  # noqa: BLE001 - reported in the worker's log and exit code
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids[pid] = k
    failed = None
    while pids:
        pid, status = os.wait()
        k = pids.pop(pid)
        code = _exit_code(status)
        if code != 0 and failed is None:
            failed = (k, code)
            for other in pids:  # the run is lost: do not leave the others waiting
                os.kill(other, signal.SIGKILL)
    if failed is not None:
        k, code = failed
        print(f"worker {k} exited with code {code}: {_tail_text(run_dir / f'w{k}.log')}", file=sys.stderr)
        return 1
    return 0


def _exit_code(status: int) -> int:
    """``os.waitstatus_to_exitcode`` (Python 3.9+) for Python 3.8 too: exit code, or -signal if killed."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def child_worker(a: argparse.Namespace) -> int:
    """One worker on its own device (--testbed hosts): ``config.yaml`` in ``--run-dir``, the PS at
    ``--ps-address``:``--port``, the links shaped by tc on the device (no token bucket here)."""
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    if not 0 <= a.worker_id < cfg["workers"]:
        raise SystemExit(f"run.py: error: --worker-id {a.worker_id} must lie in [0, {cfg['workers']}) (config.yaml workers)")
    _fabric_host_config(cfg, run_dir)
    wl = make_workload(cfg)
    _fabric_gate(cfg, run_dir)  # --launcher fabric: wait until every worker is ready and the links start
    # a real device has its own clock: the budget runs from this worker's start (after the gate)
    return run_worker(a.worker_id, cfg, run_dir, wl, (a.ps_address, a.port), None, a.origin,
                      stop_at_s=_budget_end(cfg, {"monotonic_s": time.monotonic()}))


def _fabric_host_config(cfg: dict, run_dir: Path) -> dict:
    """--launcher fabric: the launcher shipped the pre-trained weights into this host's run folder
    (``deploy.weights_in_run_dir``), so the workload's cache is the run folder, not the launcher's path."""
    if cfg.get("launcher") == "fabric" and cfg.get("deploy", {}).get("weights_in_run_dir"):
        cfg["cache_dir"] = str(run_dir)
    return cfg


def _fabric_gate(cfg: dict, run_dir: Path, timeout_s: float = 900.0) -> None:
    """--launcher fabric: write ``worker.ready`` once the expensive start-up is done, then wait for the
    launcher's ``links.ready`` (written on every host when all workers are ready, releasing the held
    trace replays at the same moment), so training meets the traces at their configured offsets."""
    if cfg.get("launcher") != "fabric":
        return
    _pay_lazy_imports()
    _write_atomic(run_dir / WORKER_READY_FILE, f"{time.monotonic()!r}\n")
    _wait_for(run_dir / GO_FILE, "the launcher's go (every worker ready, links started)", timeout_s)


def _pay_lazy_imports() -> None:
    """Import what a worker would otherwise import after the links start: the engine, and ``torch._dynamo``,
    which ``torch.optim.Optimizer.__init__`` imports on its first call (about 2 s of CPU per process).
    Paid after the go, it delayed every worker's join by 6-14 s on 2 cores, while the traces were
    already replaying: training met them that much past their configured offsets, by a different
    amount in every run."""
    import torch

    import rog.optim  # noqa: F401

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _budget_end(cfg: dict, links: dict) -> float | None:
    """Monotonic time at which ``time_budget_s`` runs out, counted from the links' start (None: no budget)."""
    budget = cfg.get("time_budget_s")
    return None if budget is None else float(links["monotonic_s"]) + float(budget)


def run_worker(k: int, cfg: dict, run_dir: Path, wl, server: tuple[str, int], rate, origin: float,
               stop_at_s: float | None = None) -> int:
    """Worker ``k``: adapt the pre-trained model on its shard with ROGOptimizer; worker 0 also evaluates.

    ``server``: the PS's address as this worker reaches it; ``rate``: its uplink's token-bucket
    rate (Mbit/s or a trace callable; None on the emulated testbed, where tc shapes)."""
    if cfg["library"] == "DDP":  # the torch.distributed gloo baseline (no token bucket: loopback runs unshaped)
        from rog.baselines.ddp import run_ddp_worker

        return run_ddp_worker(k, cfg, run_dir, wl, server, origin, stop_at_s=stop_at_s)
    import torch
    import torch.nn.functional as F

    from rog.optim import ROGOptimizer
    from rog.runtime import EventLog, events_file_name, worker_rank

    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"] * 1000 + k)  # stochastic depth
    model = wl.pretrained_model(cfg["model"])
    E = cfg["batch_multiple"]
    batches = wl.worker_batches(k, cfg["base_batch"], seed=cfg["seed"])
    losses: list[float] = []
    ck = cfg["checkpoint"]
    writer = sched = None
    t_sched0 = 0.0
    with EventLog(run_dir / events_file_name(worker_rank(k)), worker_rank(k), cfg["run_id"], origin) as events:
        opt = ROGOptimizer(model.parameters(), server=server, worker_id=k, lr=cfg["lr"],
                           policy=cfg["library"], threshold=cfg["threshold"], compression=cfg["compression"],
                           momentum=cfg["momentum"], weight_decay=cfg["weight_decay"], rate_mbit=rate,
                           compute_target_s=SO.worker_compute_s(cfg, k), events=events, chunk_share=cfg.get("chunk_share"),
                           policy_options=SO.policy_options(cfg),
                           transport_options=dict(burst_bytes=BURST_BYTES),
                           reconnect_timeout_s=cfg.get("faults", {}).get("reconnect_timeout_s", 600.0))
        if stop_at_s is not None and cfg.get("time_budget_s") is not None:
            # the budget is training time: count it from the join (every worker connected), so a slow
            # start-up (model load, a loaded machine) does not eat into one system's budget more than another's
            stop_at_s = max(stop_at_s, time.monotonic() + float(cfg["time_budget_s"]))

        def evaluate(flushed: bool = False) -> None:
            t0 = time.monotonic()
            m = wl.test_metrics(model)  # eval mode, no grad, streamed in batches; training flag restored
            loss, acc = float(m["loss"]), float(m["accuracy"])
            train_loss = sum(losses) / len(losses) if losses else None
            losses.clear()
            # the record starts when the test started (ROGOptimizer.record_eval stamps the end; the energy
            # timeline needs event starts, or the eval would overlap the next compute)
            events.write("eval", events.at(t0), iteration=opt.iteration, accuracy=acc, loss=loss,
                         duration_s=time.monotonic() - t0, worker=k, flushed=flushed, train_loss=train_loss)

        if k in ck["workers"]:  # after the join: every worker's schedule starts together
            from rog.checkpoint import CheckpointSchedule, CheckpointWriter, checkpoint_dir

            writer = CheckpointWriter(checkpoint_dir(run_dir), worker=k, meta=dict(
                model=cfg["model"], workload=cfg["workload"], run_id=cfg["run_id"]))
            if ck["every_s"] > 0:
                sched = CheckpointSchedule(ck["every_s"], ck["triple_every"], ck["time_scale"])
            t_sched0 = time.monotonic()
            writer.submit(model, iteration=0, t_s=events.now_s(), block=True)  # the starting model
        if k == 0:
            evaluate()
        for n in range(1, cfg["iterations"] + 1):
            opt.zero_grad()
            total = 0.0
            for _ in range(E):  # -b: gradient accumulation over E mini-batches
                x, y = next(batches)
                loss = F.cross_entropy(model(x), y) / E
                loss.backward()
                total += float(loss.detach())
            losses.append(total)
            opt.step()
            # the iteration boundary: the last one when the count is reached or the time budget has run out
            last = n == cfg["iterations"] or (stop_at_s is not None and time.monotonic() >= stop_at_s)
            if k == 0 and (n % cfg["eval_every"] == 0 or last):
                evaluate()
            if writer is not None and (last or (sched is not None and sched.due(time.monotonic() - t_sched0))):
                # the model this worker holds after its pull of iteration n (parameters and its own BN buffers)
                writer.submit(model, iteration=n, t_s=events.now_s(), block=last)
            if last:
                break
        opt.close()
        if writer is not None:
            writer.close()  # waits for the last write; raises CheckpointError if any write failed
        if k == 0:
            evaluate(flushed=True)
    return 0


def child_prepare(a: argparse.Namespace) -> int:
    """--serve-only: pre-train / load the model and write the layout (what the worker host does in a full run)."""
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    write_layout(cfg, run_dir, make_workload(cfg))
    return 0


# ----------------------------------------------------------------------------- the launcher
class _Tail:
    """Reads the complete new lines of a growing JSON-lines file (local, or remote through ``reader(offset)
    -> bytes``; then every byte read is also appended to ``path``, a live local mirror)."""

    def __init__(self, path: Path, reader=None) -> None:
        self.path, self.pos, self.buf, self.reader = path, 0, b"", reader

    def read(self) -> list[dict]:
        if self.reader is not None:
            data = self.reader(self.pos)
            if data:
                with open(self.path, "ab") as f:
                    f.write(data)
        else:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.pos)
                    data = f.read()
            except FileNotFoundError:
                return []
        self.pos += len(data)
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return out


class _Progress:
    """Per-worker progress from the event logs: iterations done, time composition, worker 0's accuracy."""

    def __init__(self, run_dir: Path, n_workers: int, readers: dict | None = None) -> None:
        """``readers``: event rank -> ``reader(offset) -> bytes`` of that rank's remote event log
        (--launcher fabric); the logs are then mirrored into ``run_dir`` while the run goes on."""
        self.tails = [_Tail(run_dir / f"events-w{k}.jsonl", None if readers is None else readers[f"w{k}"])
                      for k in range(n_workers)]
        self.extra = [] if readers is None else [_Tail(run_dir / f"events-{r}.jsonl", f) for r, f in readers.items()
                                                 if not r.startswith("w")]
        self.done = [0] * n_workers
        self.time = {"compute": 0.0, "push": 0.0, "pull": 0.0, "stall": 0.0}
        self.accuracy: float | None = None

    def update(self) -> None:
        for tail in self.extra:  # mirrored only (the PS's log)
            tail.read()
        for k, tail in enumerate(self.tails):
            for rec in tail.read():
                kind = rec.get("kind")
                if kind in self.time:
                    self.time[kind] += float(rec.get("duration_s", 0.0))
                if kind == "pull":
                    self.done[k] = max(self.done[k], int(rec["iteration"]))
                if kind == "eval" and not rec.get("flushed"):
                    self.accuracy = float(rec["accuracy"])

    def stall_share(self) -> float:
        total = sum(self.time.values())
        return self.time["stall"] / total if total > 0 else 0.0

    def show(self, bar) -> None:
        """Update a tqdm bar: iterations (the slowest worker), worker 0's accuracy, stall share (ETA: tqdm's)."""
        bar.n = min(self.done) if self.done else 0
        acc = "-" if self.accuracy is None else f"{100 * self.accuracy:.1f}%"
        bar.set_postfix_str(f"acc {acc} stall {100 * self.stall_share():.0f}%", refresh=True)


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL if the launcher dies, so no process outlives a killed run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Children:
    """The run's child processes; every one is killed on exit."""

    def __init__(self, run_dir: Path, env: dict, origin: float) -> None:
        self.run_dir, self.env, self.origin = run_dir, env, origin
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: list = []

    def spawn(self, name: str, args: list[str], wrap=None) -> subprocess.Popen:
        """Start ``run.py --child ...``; ``wrap`` turns the argv into another (e.g. ``ip netns exec NS argv``)."""
        log = open(self.run_dir / f"{name}.log", "wb")
        self.logs.append(log)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--run-dir", str(self.run_dir), "--origin", repr(self.origin), *args]
        if wrap is not None:
            cmd = wrap(cmd)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                cwd=str(ROOT), start_new_session=True, preexec_fn=_set_pdeathsig)
        self.procs[name] = proc
        return proc

    def failed(self) -> str | None:
        """Why the run failed (a child exited non-zero), or None."""
        for name, proc in self.procs.items():
            rc = proc.poll()
            if rc not in (None, 0):
                return f"{name} exited with code {rc}: {_tail_text(self.run_dir / f'{name}.log')}"
        return None

    def all_done(self) -> bool:
        return all(p.poll() == 0 for p in self.procs.values())

    def kill_all(self) -> None:
        """SIGTERM each child's process group (a child and the workers it forked), SIGKILL after 3 s."""
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        end = time.monotonic() + 3.0
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        for log in self.logs:
            log.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail_text(path: Path, n_lines: int = 6) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n_lines:]) if lines else "(empty log)"


def prepare_run_dir(cfg: dict, result_dir: str, overwrite: bool) -> Path:
    run_dir = Path(result_dir) / cfg["run_id"]
    if (run_dir / "DONE").exists() and not overwrite:
        raise SystemExit(f"run.py: error: {run_dir} already holds a completed run; pass --overwrite to replace it")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return run_dir


def write_layout(cfg: dict, run_dir: Path, wl) -> None:
    """Pre-train the quick model (or load it from the cache) and save its parameter layout for the PS."""
    import torch

    from rog.rows import RowPartition

    wl.pretrained_state(cfg["model"])
    with torch.random.fork_rng(devices=[]):
        part = RowPartition.from_module(wl.make_model(cfg["model"]))
    _write_atomic(run_dir / "layout.json", json.dumps(dict(names=part.names, shapes=part.shapes)) + "\n")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _wait_for(path: Path, what: str, timeout_s: float = 900.0) -> Path:
    """Wait until ``path`` exists (written atomically by another process of the run)."""
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"waited {timeout_s} s for {what} ({path.name})")
        time.sleep(0.05)
    return path


class _Terminated(Exception):
    """The launcher received SIGTERM or SIGHUP."""


def _terminated(signum, frame) -> None:
    raise _Terminated(signal.Signals(signum).name)


def launch(cfg: dict, run_dir: Path, progress: bool, serve_only: bool = False, port: int = 0,
           command: list[str] | None = None, hosts_file=None) -> int:
    if cfg.get("launcher") == "fabric" and not serve_only:  # --testbed hosts, and emulated with sshd
        return _launch_fabric(cfg, run_dir, progress, command, hosts_file)
    env = dict(os.environ)
    if serve_only:
        if "ROG_SECRET" not in env:
            raise SystemExit("run.py: error: --serve-only needs ROG_SECRET in the environment (share it with your workers)")
    else:
        env["ROG_SECRET"] = secrets.token_hex(32)  # per run; children read it from their environment only
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t_start, start_unix = time.monotonic(), time.time()
    children = _Children(run_dir, env, t_start)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a killed launcher still cleans up and marks INCOMPLETE
        signal.signal(sig, _terminated)
    status, reason = "incomplete", "not started"
    bar = None
    net = None  # the emulated testbed (EmulatedNetwork) while it exists
    schedules: dict = {}
    left: list[str] = []
    replay_stats: dict = {}
    links = None  # {"t_s", "monotonic_s"}: when the links started replaying (event clock / monotonic)
    try:
        ps_wrap = None
        schedules = _schedules(cfg) if not serve_only else {}
        if cfg["testbed"] == "emulated":
            from rog.experiment.emulated import EmulatedNetwork

            em = cfg["emulated"]
            net = EmulatedNetwork(cfg["workers"], em["prefix"], cap_mbit=cfg["cap_mbit"], shape=cfg["shape"],
                                  rate_mbit=cfg["rate_mbit"])
            net.open()
            ps_wrap = lambda argv: net.testbed.exec_argv("ps", argv)  # noqa: E731
        children.spawn("ps", ["--child", "ps", "--port", str(port)], wrap=ps_wrap)
        if serve_only:
            children.spawn("prepare", ["--child", "prepare"])
            port_file = run_dir / "ps.port"
            while not port_file.exists():
                if children.failed():
                    raise RuntimeError(children.failed())
                time.sleep(0.05)
            print(f"parameter server listening on 127.0.0.1:{port_file.read_text()} for {cfg['workers']} worker(s)", flush=True)
        else:
            children.spawn("workers", ["--child", "workers"])
        prog = _Progress(run_dir, cfg["workers"])
        if progress and not serve_only:
            from tqdm import tqdm

            bar = tqdm(total=cfg["iterations"], desc=cfg["run_id"], unit="it", file=sys.stderr, mininterval=0.5)
        while True:
            why = children.failed()
            if why:
                raise RuntimeError(why)
            if links is None and (run_dir / "workers.ready").exists():
                links = _start_links(run_dir, net, schedules, t_start)
            if net is not None:
                net.check()
            if children.all_done():
                break
            prog.update()
            if bar is not None:
                bar.n = min(prog.done) if prog.done else 0
                acc = "-" if prog.accuracy is None else f"{100 * prog.accuracy:.1f}%"
                bar.set_postfix_str(f"acc {acc} stall {100 * prog.stall_share():.0f}%", refresh=True)
            time.sleep(0.25 if links is not None else 0.02)
        prog.update()
        if bar is not None:
            bar.n = min(prog.done)
            bar.refresh()
        status, reason = "done", ""
    except KeyboardInterrupt:
        reason = "interrupted (Ctrl-C)"
    except _Terminated as e:
        reason = f"terminated ({e})"
    except Exception as e:  # noqa: BLE001 - recorded in INCOMPLETE
        reason = f"{type(e).__name__}: {e}"
    finally:
        if bar is not None:
            bar.close()
        children.kill_all()
        if net is not None:
            replay_stats = net.replay_stats()
            try:
                left = net.close()
            except Exception as e:  # noqa: BLE001 - reported, the run's results are still written
                left = [f"cleanup failed: {type(e).__name__}: {e}"]
    end_t_s, end_unix = time.monotonic() - t_start, time.time()
    if cfg["testbed"] == "loopback" and schedules and links is not None:  # the fallback's replay logs
        from rog.experiment.emulated import write_planned_log
        from rog.experiment.tracking import replay_log_name

        for k, sched in schedules.items():
            for d in (("up", "down") if cfg["shape"] == "both" else ("up",)):
                write_planned_log(run_dir / replay_log_name(k, d), sched, links["t_s"], end_t_s, start_unix)
    summary = summarise(run_dir, cfg, end_t_s)
    summary.update(status=status, testbed=cfg["testbed"])
    if not serve_only:
        summary.update(finalise(run_dir, cfg))
    if left:
        summary["leftovers"] = left
        print(f"warning: the testbed {cfg['emulated']['prefix']} left {left}", file=sys.stderr)
    _mark(run_dir, status, reason, summary)
    _manifest(run_dir, cfg, command or sys.argv, start_unix, end_unix, status, reason, left, replay_stats,
              None if links is None else links["t_s"])
    print(json.dumps(summary), flush=True)
    return 0 if status == "done" and not left else 1


def _mark(run_dir: Path, status: str, reason: str, summary: dict) -> None:
    """The completion marker: ``DONE`` (the summary as JSON) or ``INCOMPLETE`` (the reason; the partial
    results stay next to it)."""
    if status == "done":
        (run_dir / "DONE").write_text(json.dumps(summary) + "\n")
    else:
        summary["reason"] = reason
        (run_dir / "INCOMPLETE").write_text(reason + "\n")


def _start_links(run_dir: Path, net, schedules: dict, t_start: float) -> dict:
    """Start every link's replay now (emulated: tc threads; fallback: the token buckets read the time
    from ``links.ready``) and tell the worker host; returns the ``links.ready`` content."""
    from rog.experiment.tracking import replay_log_name

    now = time.monotonic()
    if net is not None:
        net.start_replays(schedules, run_dir, t_start, replay_log_name)
    links = {"t_s": now - t_start, "monotonic_s": now}
    _write_atomic(run_dir / "links.ready", json.dumps(links) + "\n")
    return links


def finalise(run_dir: Path, cfg: dict) -> dict:
    """tracking.json and energy.json for a (possibly partial) run; returns the summary fields."""
    from rog.experiment.energy_report import write_energy_json
    from rog.experiment.tracking import bandwidth_tracking
    from rog.testbed.profiles import load_profile

    out: dict = {}
    if cfg["trace"] is not None:
        try:
            dirs = ("up", "down") if cfg["shape"] == "both" else ("up",)
            tr = {d: bandwidth_tracking(run_dir, d).to_dict() for d in dirs}
            (run_dir / "tracking.json").write_text(json.dumps(tr, indent=2) + "\n")
            out["tracking"] = {d: {k: r[k] for k in ("n", "pearson", "spearman", "median_ratio")} for d, r in tr.items()}
        except Exception as e:  # noqa: BLE001 - a partial run may lack logs
            out["tracking"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        doc = write_energy_json(run_dir, cfg["workers"], load_profile(cfg["profile"]), load_profile(cfg["ps_profile"]))
        out["energy_j"] = {rank: d.get("energy_j") for rank, d in doc["devices"].items()}
        out["energy_source"] = sorted({d["source"] for d in doc["devices"].values()})
    except Exception as e:  # noqa: BLE001
        out["energy_j"] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _manifest(run_dir: Path, cfg: dict, command: list[str], start_unix: float, end_unix: float, status: str,
              reason: str, left: list[str], replay_stats: dict, links_t_s: float | None, hosts: dict | None = None) -> None:
    from rog.experiment.manifest import write_manifest

    if hosts is not None:  # --launcher fabric: the hosts as deployed
        pass
    elif cfg["testbed"] == "emulated":
        hosts = cfg["emulated"]["hosts"]
    else:
        hosts = {"ps": {"address": "127.0.0.1"}, **{f"w{k}": {"address": "127.0.0.1"} for k in range(cfg["workers"])}}
    traces = [] if cfg["trace"] is None else [{"path": cfg["trace"]["path"], "sha256": cfg["trace"]["sha256"]}]
    try:
        write_manifest(run_dir, repo=ROOT, command=[sys.executable, *command], testbed=cfg["testbed"], hosts=hosts,
                       traces=traces, start_unix_s=start_unix, end_unix_s=end_unix, status=status, reason=reason,
                       fallback_reason=cfg.get("fallback_reason"), prefix=cfg.get("emulated", {}).get("prefix"),
                       leftovers_after_cleanup=left, replay=replay_stats, replay_start_t_s=links_t_s,
                       launcher=cfg.get("launcher", "local"))
    except Exception as e:  # noqa: BLE001
        print(f"warning: manifest.json not written: {e}", file=sys.stderr)


def summarise(run_dir: Path, cfg: dict, wall_s: float) -> dict:
    """metrics.csv from worker 0's evaluations, and the run's means per iteration (partial runs too)."""
    from rog.runtime import EventLogError, read_events

    logs = {}
    for k in range(cfg["workers"]):
        path = run_dir / f"events-w{k}.jsonl"
        if path.exists():
            try:
                logs[k] = read_events(path, allow_partial_last_line=True)[1]
            except EventLogError as e:
                logs[k] = []
                print(f"warning: {e}", file=sys.stderr)
    recs0 = logs.get(0, [])
    starts = [r["t_s"] for recs in logs.values() for r in recs if r["kind"] == "run_start"]
    t0 = min(starts) if starts else 0.0
    evals = [r for r in recs0 if r["kind"] == "eval" and not r.get("flushed")]
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "wall_s", "loss", "test_accuracy", "train_loss"])
        for r in evals:
            w.writerow([r["iteration"], f"{max(0.0, r['t_s'] - t0):.3f}", f"{r['loss']:.6f}", f"{r['accuracy']:.6f}",
                        "" if r.get("train_loss") is None else f"{r['train_loss']:.6f}"])
    flushed = [r for r in recs0 if r["kind"] == "eval" and r.get("flushed")]
    sums = {"compute": 0.0, "push": 0.0, "pull": 0.0, "stall": 0.0}
    n_iter = 0
    ends = []
    for recs in logs.values():
        for r in recs:
            if r["kind"] in sums:
                sums[r["kind"]] += r["duration_s"]
            if r["kind"] == "pull":
                n_iter += 1
                ends.append(r["t_s"] + r["duration_s"])
    per = {f"{k}_s": (v / n_iter if n_iter else None) for k, v in sums.items()}
    per["comm_s"] = (sums["push"] + sums["pull"]) / n_iter if n_iter else None
    iterations = min((sum(1 for r in recs if r["kind"] == "pull") for recs in logs.values()), default=0)
    return dict(
        run_dir=str(run_dir),
        iterations=iterations,
        start_accuracy=evals[0]["accuracy"] if evals else None,
        final_accuracy=evals[-1]["accuracy"] if evals else None,
        flushed_accuracy=flushed[-1]["accuracy"] if flushed else None,
        train_s=(max(ends) - t0) if ends else None,
        wall_s=wall_s,
        **{f"mean_{k}": v for k, v in per.items()},
    )


def deploy_plan(cfg: dict, hosts_file, result_dir: str, origin: float | None = None, extra_files=(),
                power: bool = True):
    """The rog.deploy plan of a Fabric run (pure data: nothing is connected, nothing written).

    Every host gets the run's ``config.yaml`` (and ``layout.json``, the model layout the PS needs, plus
    ``extra_files``: the pre-trained weights) in its run folder; the PS starts ``run.py --child ps`` on
    the hosts file's port, every worker ``run.py --child worker`` for its own worker id; both read
    everything else from ``config.yaml``, so new options flow through unchanged.  Replays use the
    run's per-worker offsets and schedules (as the local launcher) and start gated: held until every
    worker wrote ``worker.ready``, then released with the workers by ``links.ready``.  ``origin``: the
    run's clock origin when all hosts share this machine's clock (emulated testbed), else None.
    ``power``: start ``scripts/power_sampler.py`` on every host (real devices; on the emulated testbed
    every device's energy is the state model computed from its events afterwards, as with the local
    launcher, so samplers there would only cost CPU)."""
    from rog.deploy.plan import CodeBundle, RunSpec, build_plan

    run_dir = Path(result_dir) / cfg["run_id"]
    child = ("{python}", "scripts/run.py", "--run-dir", "{run_dir}") + (() if origin is None else ("--origin", repr(origin)))
    files = [(str(run_dir / "config.yaml"), "config.yaml"), (str(run_dir / "layout.json"), "layout.json")]
    files += [(str(f), Path(f).name) for f in extra_files]
    spec = RunSpec(
        run_id=cfg["run_id"],
        ps_argv=(*child, "--child", "ps", "--port", "{ps_port}"),
        worker_argv=(*child, "--child", "worker", "--worker-id", "{worker_id}", "--ps-address", "{ps_address}",
                     "--port", "{ps_port}"),
        files=tuple(files),
        trace=None if cfg["trace"] is None else cfg["trace"]["path"],
        replay_time_scale=cfg["time_scale"], replay_rate_scale=cfg["rate_scale"],
        replay_mode=cfg["replay_mode"] or "recorded", replay_seed=cfg["seed"],
        replay_offsets_s=cfg["worker_offsets_s"], replay_seed_per_host=False, replay_origin_monotonic_s=origin,
        power=power, worker_ready_file=WORKER_READY_FILE, go_file=GO_FILE,
        ps_port=cfg.get("hosts", {}).get("port", DEFAULT_PS_PORT),
        env={"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    return build_plan(hosts_file, spec, CodeBundle.scan(ROOT), run_dir)


def _choose_launcher(requested: str | None, cfg: dict) -> tuple[str, str | None]:
    """(launcher, warning or None) for ``--launcher`` on the run's testbed (see the flag's help)."""
    testbed = cfg["testbed"]
    if testbed == "hosts":
        if requested == "local":
            raise SystemExit("run.py: error: --testbed hosts is deployed over SSH: drop --launcher local")
        return "fabric", None
    if testbed == "loopback":
        if requested == "fabric" and cfg["testbed_requested"] != "emulated":
            raise SystemExit("run.py: error: --launcher fabric needs --testbed emulated (sshd in the namespaces) or "
                             "--testbed hosts; loopback runs fork their processes (--launcher local)")
        return "local", (None if requested != "fabric" else
                         "warning: --launcher fabric needs the emulated testbed, which fell back to loopback; "
                         "running with --launcher local")
    if requested == "local":
        return "local", None
    from rog.testbed.sshd import find_sshd

    missing = None
    if find_sshd() is None:
        missing = "sshd (OpenSSH server) is not installed"
    else:
        try:
            import fabric  # noqa: F401
        except ImportError:
            missing = "Fabric is not installed (pip install -e .[deploy])"
    if missing is None:
        return "fabric", None
    hint = "install sshd with: bash scripts/setup_sshd.sh" if "sshd" in missing else "pip install -e .[deploy]"
    if requested == "fabric":
        raise SystemExit(f"run.py: error: --launcher fabric: {missing}; {hint}")
    return "local", (f"warning: {missing}, so the emulated testbed runs with --launcher local: processes are forked on "
                     f"this machine instead of deployed over SSH as on real devices; {hint}")


def _launch_fabric(cfg: dict, run_dir: Path, progress: bool, command: list[str] | None, hosts_file) -> int:
    """Run the experiment through :mod:`rog.deploy`: on --testbed hosts the hosts file's devices, on the
    emulated testbed one sshd per namespace (:class:`rog.experiment.emulated.EmulatedHosts`).  Same
    plan and runner for both: code sync, files, PS, held replays, workers, ready gate, go, wait with a
    live progress line from the remote event logs, stop, collect; then the same summary, finalise,
    manifest and DONE/INCOMPLETE as the local launcher."""
    from rog.deploy.fabric_runner import FabricRunner

    t_start, start_unix = time.monotonic(), time.time()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a killed launcher still stops the hosts and marks INCOMPLETE
        signal.signal(sig, _terminated)
    emulated = cfg["testbed"] == "emulated"
    status, reason = "incomplete", "not started"
    bar = site = None
    left: list[str] = []
    go: dict = {}
    ssh_hosts: dict = {}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("ROG_SECRET", None)
    local = _Children(run_dir, env, t_start)
    try:
        shipped = _prepare_locally(cfg, run_dir, local)
        if emulated:
            from rog.experiment.emulated import EmulatedHosts, EmulatedNetwork

            net = EmulatedNetwork(cfg["workers"], cfg["emulated"]["prefix"], cap_mbit=cfg["cap_mbit"],
                                  shape=cfg["shape"], rate_mbit=cfg["rate_mbit"])
            site = EmulatedHosts(net, python=sys.executable)
            hosts_file = site.open(cfg["ps_profile"], cfg["profile"], "both" if cfg["shape"] == "both" else "egress",
                                   replay=cfg["trace"] is not None)
            ssh_hosts = site.ssh_info()
        plan = deploy_plan(cfg, hosts_file, str(run_dir.parent), origin=t_start if emulated else None,
                           extra_files=shipped, power=not emulated)
        ssh_hosts = {h.rank: {**ssh_hosts.get(h.rank, {}), "host": h.name, "target": h.target, "runtime": h.runtime,
                              "image": h.image, "interface": h.interface, "device_profile": h.device_profile}
                     for h in hosts_file.hosts}
        log = (lambda m: print(m, file=sys.stderr, flush=True)) if progress else None
        with FabricRunner(plan, secret=secrets.token_hex(32), log=log, poll_s=1.0) as runner:
            def reader(host: str, rank: str):
                def read(offset: int) -> bytes:
                    try:
                        return runner.read_remote(host, f"events-{rank}.jsonl", offset)
                    except Exception:  # noqa: BLE001 - progress only; the status poll reports a lost host
                        return b""
                return read

            prog = _Progress(run_dir, cfg["workers"], readers={h.rank: reader(h.name, h.rank) for h in hosts_file.hosts})
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=cfg["iterations"], desc=cfg["run_id"], unit="it", file=sys.stderr, mininterval=0.5)

            def on_poll(states: dict) -> None:
                prog.update()
                if bar is not None:
                    prog.show(bar)

            def on_phase(phase: str) -> None:
                if phase == "go":
                    go["t_s"] = time.monotonic() - t_start

            outcome = runner.run(on_poll=on_poll, on_phase=on_phase)
        if outcome.status == "done":
            status, reason = "done", ""
        elif outcome.status == "interrupted":
            reason = "interrupted (Ctrl-C)"
        elif outcome.reason.startswith("_Terminated: "):
            reason = f"terminated ({outcome.reason.split(': ', 1)[1]})"
        else:
            reason = outcome.reason or "the deployment failed"
    except KeyboardInterrupt:
        reason = "interrupted (Ctrl-C)"
    except _Terminated as e:
        reason = f"terminated ({e})"
    except Exception as e:  # noqa: BLE001 - recorded in INCOMPLETE
        reason = f"{type(e).__name__}: {e}"
    finally:
        # a second Ctrl-C or SIGTERM must not cut the teardown short (namespaces, sshd, keys would be left)
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            if bar is not None:
                bar.close()
            local.kill_all()
            if site is not None:
                try:
                    left = site.close()
                except Exception as e:  # noqa: BLE001 - reported, the run's results are still written
                    left = [f"cleanup failed: {type(e).__name__}: {e}"]
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
    _fabric_collected(run_dir, cfg)
    end_t_s, end_unix = time.monotonic() - t_start, time.time()
    if emulated:
        hosts = {rank: {**d, **ssh_hosts.get(rank, {})} for rank, d in cfg["emulated"]["hosts"].items()}
    else:
        hosts = ssh_hosts
    summary = summarise(run_dir, cfg, end_t_s)
    summary.update(status=status, testbed=cfg["testbed"], launcher="fabric")
    summary.update(finalise(run_dir, cfg))
    if left:
        summary["leftovers"] = left
        print(f"warning: the run left {left}", file=sys.stderr)
    _mark(run_dir, status, reason, summary)
    _manifest(run_dir, cfg, command or sys.argv, start_unix, end_unix, status, reason, left, {}, go.get("t_s"),
              hosts=hosts)
    print(json.dumps(summary), flush=True)
    return 0 if status == "done" and not left else 1


def _prepare_locally(cfg: dict, run_dir: Path, children: "_Children") -> list[Path]:
    """Before deploying: ``layout.json`` (the PS's model layout) and the pre-trained weights to ship
    to every host (the quick workload's cache entry for this seed); records in ``config.yaml`` whether
    weights were shipped.  ``run.py --child prepare`` here (torch: seconds of CPU) produces both, unless
    ``<cache>/fabric-prepared.json`` already holds them for this model, seed and code (a hash of the
    workload, model, row and compression sources: a changed recipe or model re-prepares)."""
    import hashlib

    cache = Path(cfg["cache_dir"])
    cache = cache if cache.is_absolute() else ROOT / cache
    deps = sorted((ROOT / "rog" / "models").glob("*.py")) + sorted((ROOT / "rog" / "workloads").glob("*.py")) + [
        ROOT / "rog" / "rows.py"]
    h = hashlib.sha256()
    for f in deps:
        h.update(f.read_bytes())
    key = f"{cfg.get('workload', 'quick')}/{cfg['model']}/seed{cfg['seed']}/{h.hexdigest()[:16]}"
    index_path = cache / "fabric-prepared.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    hit = index.get(key)
    if hit and all((cache / n).is_file() for n in hit["weights"]):
        _write_atomic(run_dir / "layout.json", hit["layout"])
        shipped = [cache / n for n in hit["weights"]]
    else:
        proc = children.spawn("prepare", ["--child", "prepare"])
        while proc.poll() is None:
            time.sleep(0.05)
        if proc.returncode != 0:
            raise RuntimeError(f"preparing the model failed: {_tail_text(run_dir / 'prepare.log')}")
        best = None
        for pt in cache.glob(f"pretrained-{cfg['model']}-*.pt"):
            try:
                meta = json.loads(pt.with_suffix(".json").read_text())
            except (OSError, ValueError):
                continue
            if meta.get("model") == cfg["model"] and meta.get("seed") == cfg["seed"]:
                if best is None or pt.stat().st_mtime > best.stat().st_mtime:
                    best = pt
        shipped = [best, best.with_suffix(".json")] if best is not None else []
        if shipped:
            try:
                index[key] = {"layout": (run_dir / "layout.json").read_text(), "weights": [q.name for q in shipped]}
                _write_atomic(index_path, json.dumps(index) + "\n")
            except OSError:
                pass
    cfg["deploy"] = {"weights_in_run_dir": bool(shipped), "weights": [q.name for q in shipped]}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return shipped


def _fabric_collected(run_dir: Path, cfg: dict) -> None:
    """After collecting: each worker's replay log (``replay-w<k>.csv``, both directions of its link changed
    together) under the names the analysis reads (``replay-w<k>-up.csv``, ``-down.csv``), and every
    host's checkpoints in ``<run>/checkpoints/``.  The hosts' own folders stay in ``hosts/``."""
    from rog.experiment.tracking import replay_log_name

    for k in range(cfg["workers"]):
        src = run_dir / f"replay-w{k}.csv"
        if src.is_file():
            for d in (("up", "down") if cfg["shape"] == "both" else ("up",)):
                shutil.copyfile(src, run_dir / replay_log_name(k, d))
            src.unlink()
    for ck in sorted((run_dir / "hosts").glob("*/checkpoints")):
        shutil.copytree(ck, run_dir / "checkpoints", dirs_exist_ok=True)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.child == "ps":
        return child_ps(a)
    if a.child == "workers":
        return child_workers(a)
    if a.child == "worker":
        return child_worker(a)
    if a.child == "prepare":
        return child_prepare(a)
    cfg = resolve_config(a)
    if cfg["fallback_reason"]:
        from rog.testbed.netns import NO_NETNS_WARNING

        print(NO_NETNS_WARNING.format(reason=cfg["fallback_reason"]), file=sys.stderr, flush=True)
    if cfg["cap_mbit"] is not None and cfg["testbed"] != "emulated":
        print("warning: --cap-mbit (the shared-channel cap) is applied by the emulated testbed only; "
              "this loopback run ignores it (config.yaml records cap_applied: false)", file=sys.stderr, flush=True)
    launcher, warning = ("local", None) if a.serve_only else _choose_launcher(a.launcher, cfg)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    cfg["launcher"] = launcher  # children read it from config.yaml (the fabric gate, shipped weights)
    if launcher == "fabric":  # remote processes run from the shipped code folder: no relative paths
        cfg["cache_dir"] = str(Path(cfg["cache_dir"]).resolve())
    if cfg["testbed"] == "hosts" and a.dry_run:
        print(deploy_plan(cfg, a.hosts_file, a.result_dir).render(), flush=True)
        return 0
    if cfg["testbed"] == "hosts":  # refuse before writing or preparing anything
        from rog.deploy.fabric_runner import preflight

        problems = preflight(a.hosts_file)
        if problems:
            raise SystemExit(f"run.py: error: --hosts {a.hosts}:\n  " + "\n  ".join(problems))
    run_dir = prepare_run_dir(cfg, a.result_dir, a.overwrite)
    return launch(cfg, run_dir, progress=not a.no_progress, serve_only=a.serve_only, port=a.port,
                  command=[str(Path(__file__)), *(sys.argv[1:] if argv is None else argv)], hosts_file=a.hosts_file)


if __name__ == "__main__":
    sys.exit(main())
