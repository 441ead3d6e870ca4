"""The ``scripts/run.py`` command: its flags, their checks, and ``main`` (configure, then launch or run
one child).  The flags follow the original artifact (``--library``, ``--threshold``, ``-b``, ``-e``,
``-n``, ``-c``); ``scripts/run.py``'s docstring is the user's manual."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from rog.chunks import ARTIFACT_CHUNK_SHARE
from rog.cli_parser import OneLineParser, add_renamed
from rog.codecs.codec_registry import CODECS
from rog.options import add_option_flags, options_from
from rog.policies import registry
from rog.experiment.emulated import SHAPES
from rog.experiment.links import link_delay_ms_arg
from rog.experiment.traceplan import CONTROLS, DEFAULT_REGIME_RATIO
from rog.experiment import rerun as RR, schedule_options as SCH, stream_options as STO, sync_options as SO
from rog.experiment import topk_options as TO
from rog.traces import REPLAY_MODES
from rog.workloads.registry import WORKLOADS  # torch-free

from .config import (BASE_BATCH, DEFAULT_EVAL_EVERY, DEFAULT_ITERATIONS, DEFAULT_LR, DEFAULT_WORKERS, RUN_MODULE,
                     ConfigError, resolve)
from .run_config import FaultOptions

DESCRIPTION = "Run one experiment: a parameter server and N workers as processes on this machine."
TESTBEDS = ("emulated", "loopback", "hosts")
NO_TENSORBOARD_ENV = "ROG_NO_TENSORBOARD"  # set (1): --no-tensorboard by default, e.g. for a test suite's many short runs
LAUNCHERS = ("fabric", "local")  # fabric: rog.deploy over SSH (hosts, emulated with sshd); local: children started here
# run.py --help's argument groups, by concern and in this order; a mechanism's own module adds its flags to the
# group of their concern (sync_options: every policy's options, schedule_options, stream_options, topk_options)
CONCERNS = (
    ("common", "common: the flags most runs use"),
    ("testbed", "testbed: where the processes run and how they start"),
    ("links", "links: trace replay and shaping"),
    ("workload", "workload: model and data"),
    ("synchronisation", "synchronisation: the system, its staleness threshold, ADSP and ADACOMM"),
    ("atp", "ATP: ROG's speculative budget and mandatory prefix"),
    ("schedule", "schedule: the transfer schedule inside an iteration (DynaComm)"),
    ("streams", "streams: streaming data (ScaDLES)"),
    ("compression", "compression: 1-bit, raw float32, ScaDLES's Top-k"),
    ("injection", "injection: ScaDLES's (alpha, beta) data injection"),
    ("device", "device: where workers train, compute pacing and energy"),
    ("faults", "faults and recovery"),
    ("output", "output: run length, evaluation, checkpoints and the run folder"),
)


def concern_groups(p: argparse.ArgumentParser) -> dict:
    """``{concern: argument group}`` of :data:`CONCERNS`, created on ``p`` in that order."""
    return {key: p.add_argument_group(title) for key, title in CONCERNS}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``scripts/run.py``'s flags (without the cross-flag checks of :func:`parse_args`)."""
    p = OneLineParser(prog="run.py", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    groups = concern_groups(p)  # run.py --help shows the flags under these headings (CONCERNS)
    g_tb, g_link, g_work, g_sync = groups["testbed"], groups["links"], groups["workload"], groups["synchronisation"]
    g_dev, g_comp, g_run, g_fault = groups["device"], groups["compression"], groups["output"], groups["faults"]
    g_common = groups["common"]  # the ~10 flags most runs use, first in --help
    g_common.add_argument("--testbed", choices=TESTBEDS, default=None,
                   help="where the processes run: emulated = one network namespace per device with tc trace replay "
                        "(default; falls back to loopback with a warning without root), loopback = 127.0.0.1, "
                        "hosts = real devices over SSH from --hosts FILE")
    g_tb.add_argument("--hosts", default=None, help="hosts file of --testbed hosts (see configs/hosts.example.yaml)")
    g_tb.add_argument("--tcp-slow-start-after-idle", choices=("on", "off"), default=None,
                   help="TCP's slow-start restart after idle inside every namespace of the emulated testbed: on (the "
                        "kernel's default) or off (net.ipv4.tcp_slow_start_after_idle = 0, the isolation run of "
                        "docs/fleet.md); emulated testbed only, recorded in config.yaml's emulated entry")
    g_tb.add_argument("--dry-run", action="store_true",
                   help="--testbed hosts: print the deployment plan (hosts, commands, files) and exit without connecting")
    g_tb.add_argument("--launcher", choices=LAUNCHERS, default=None,
                   help="how the processes start: fabric = deployed over SSH with Fabric, on the emulated testbed through "
                        "one sshd per namespace (default when sshd is installed; always on --testbed hosts); local = "
                        "started on this machine (default on loopback, and on the emulated testbed without sshd)")
    g_common.add_argument("-c", "--control", choices=CONTROLS, default=None,
                   help="bandwidth trace to replay: outdoors, indoors or none (unshaped); default outdoors on the "
                        "emulated testbed, none on --testbed loopback or with --rate-mbit ('custom' with --trace)")
    g_link.add_argument("--trace", default=None, help="trace file to replay instead of the control's default (t_s,mbps CSV, 'seconds Mbps' record, Mahimahi or iperf3 --json)")
    g_link.add_argument("--trace-format", default=None, help="the --trace file's format: auto (default: by content), csv, record, mahimahi[:BIN_S] or iperf3 (docs/fleet.md)")
    g_link.add_argument("--replay-mode", choices=REPLAY_MODES, default="recorded",
                   help="recorded = the samples as recorded (default); artifact = the original's extra 10-90 s holds")
    g_link.add_argument("--time-scale", type=float, default=None, help="trace time multiplied by this (default: compute_s / 1.12 s, see --regime-ratio)")
    g_link.add_argument("--rate-scale", type=float, default=None,
                   help="trace rates multiplied by this (default: derived from --regime-ratio; 1.0 = the file's rates)")
    g_link.add_argument("--chunk-share", type=float, default=ARTIFACT_CHUNK_SHARE,
                   help="chunk size as a fraction of the model's full payload: the unit a cut transmission "
                        f"delivers or drops (default {ARTIFACT_CHUNK_SHARE:.4f}: the original's 1000 of 33,307 rows)")
    g_link.add_argument("--regime-ratio", type=float, default=DEFAULT_REGIME_RATIO,
                   help=f"when --rate-scale is not given: full push time at the trace's mean rate / compute time (default {DEFAULT_REGIME_RATIO}, the paper's)")
    g_link.add_argument("--worker-offsets", default=None, help="comma-separated trace start offsets in trace seconds, one per worker (default: evenly spread)")
    g_link.add_argument("--shape", choices=SHAPES, default="both", help="shape the uplink only (as the original) or both directions (default)")
    g_link.add_argument("--cap-mbit", type=float, default=None, help="shared-channel cap at the PS, uplinks and downlinks together (emulated testbed; docs/fleet.md)")
    g_dev.add_argument("--profile", default=None, help="workers' device profile for compute pacing and the power model (default quick-cpu)")
    g_dev.add_argument("--ps-profile", default="laptop", help="the parameter server's device profile for the power model (default laptop, as in the paper)")
    g_run.add_argument("--item", default=None, help="evaluation item this run belongs to (recorded in config.yaml for the analysis)")
    systems = registry.systems()  # the choices and defaults of every registered system (rog.policies.registry)
    g_common.add_argument("--library", type=str.upper, choices=tuple(systems), default="ROG",
                   help="synchronisation system (default ROG)")
    g_common.add_argument("--threshold", type=int, default=None, help="staleness threshold s (default: the system's, " + ", ".join(
        f"{n} {s.default_threshold}" for n, s in systems.items()) + ")")
    g_work.add_argument("-b", "--batchsize", type=int, default=1, help=f"batch size as a multiple of the base batch {BASE_BATCH} (default 1)")
    g_run.add_argument("-e", "--epoch", type=float, default=None, help="run until the worker with the smallest shard has seen this many epochs")
    g_run.add_argument("-n", "--note", default="", help="free text appended to the run id")
    g_common.add_argument("--workers", type=int, default=None,
                   help=f"number of workers (default {DEFAULT_WORKERS}; --testbed hosts: the hosts file's workers)")
    g_common.add_argument("--iterations", type=int, default=None, help=f"iterations per worker (default {DEFAULT_ITERATIONS}; overrides --epoch)")
    g_common.add_argument("--budget-s", dest="time_budget_s", type=float, default=None, metavar="S",
                   help="equal wall-clock budget: every worker stops at its first iteration boundary after this many "
                        "seconds from the start of the links (links.ready, one clock for all), then flushes; "
                        "--iterations (default: no cap) still caps the run")
    add_renamed(g_run, "--time-budget-s", "--budget-s", dest="time_budget_s", type=float)
    g_common.add_argument("--seed", type=int, default=0, help="seed of the data, split, noise and sampling (default 0)")
    g_link.add_argument("--rate-mbit", type=float, default=None, help="token-bucket rate per link and direction in Mbit/s (default: no limit)")
    g_link.add_argument("--link-delay-ms", type=link_delay_ms_arg, default=0.0,
                        help="extra delay of every transfer (push or pull, both directions) in ms, emulated in the transport "
                             "(no netem needed); recorded in config.yaml as link_delay_ms (default 0)")
    g_comp.add_argument("--compression", choices=tuple(CODECS), default="sign",
                   help="sign = DEFSGDM 1-bit (default), none = float32, topk = ScaDLES's Top-k (--topk-*)")
    g_common.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                   help="where workers train (default auto: the GPU when one is present; the workers of a loopback "
                        "or emulated run share it); recorded in config.yaml as device")
    g_work.add_argument("--lr", type=float, default=None,
                   help=f"worker learning rate (default: the workload's, quick {DEFAULT_LR}, cruda 1e-6 as Table II)")
    g_work.add_argument("--workload", choices=WORKLOADS, default="quick",
                   help="quick = digits, no download (default); cruda = the paper's ConvMLP-M at 224 px on noisy "
                        "Fed-CIFAR100 HDF5 (--data-dir), batch from the device profile (--profile, default jetson-xavier-nx)")
    g_work.add_argument("--data-dir", default=None,
                   help="cruda: folder with mixed_fed_cifar100_{train,test}.h5 (default data/; utils/download_data.sh "
                        "or python -m data_gen.make_tiny_fedcifar)")
    g_work.add_argument("--weights", default=None,
                   help="cruda: pre-trained ConvMLP-M CIFAR-100 state_dict (default <data-dir>/convmlp_m_cifar100.pth)")
    g_work.add_argument("--random-init", action="store_true",
                   help="cruda without weights: start from a seeded RANDOM initialisation (smoke runs only, not the paper)")
    g_work.add_argument("--test-limit", type=int, default=None,
                   help="cruda: worker 0 tests on a seeded subset of this many test images (default: the whole test file)")
    g_work.add_argument("--split", default=None,
                   help="cruda: non-IID split label_sorted (default, the artifact's), pachinko, dirichlet or iid")
    g_run.add_argument("--eval-every", type=int, default=DEFAULT_EVAL_EVERY, help=f"test worker 0's model every this many iterations (default {DEFAULT_EVAL_EVERY})")
    g_run.add_argument("--checkpoint-every-s", type=float, default=60.0,
                   help="checkpoint the model a worker holds every this many seconds, times the trace time scale "
                        "(the artifact: 60 s); 0 = only at the start and the end")
    g_run.add_argument("--checkpoint-triple-every", type=int, default=20,
                   help="triple the checkpoint period after every this many checkpoints (the artifact: 20)")
    g_run.add_argument("--checkpoint-workers", default="0",
                   help="workers that write checkpoints: comma-separated indices or 'all' (default 0)")
    g_dev.add_argument("--compute-s", type=float, default=None, help="compute pacing: each iteration's compute takes at least this long (default: none)")
    g_run.add_argument("--config", default=None, metavar="CONFIG_YAML",
                       help="rerun a recorded run: the flags recorded in its config.yaml (result/<run-id>/config.yaml) "
                            "replace the defaults, and every flag given beside --config overrides its recorded value")
    g_common.add_argument("--result-dir", default="result", help="parent directory of run directories (default result/)")
    g_run.add_argument("--cache-dir", default=None, help="where pre-trained weights are cached (default <result-dir>/.cache)")
    g_run.add_argument("--overwrite", action="store_true", help="replace an existing completed run directory")
    g_run.add_argument("--no-progress", action="store_true", help="no live progress line")
    g_common.add_argument("--json", action="store_true",
                          help="print the run's JSON summary as the last line of stdout (it is always written to "
                               "the run folder: DONE)")
    g_run.add_argument("--no-tensorboard", action="store_true",
                       default=os.environ.get(NO_TENSORBOARD_ENV, "").strip().lower() not in ("", "0", "false", "no"),
                       help="do not write TensorBoard scalars to <result-dir>/<run-id>/tb/ (tensorboard --logdir result); "
                            f"${NO_TENSORBOARD_ENV}=1 makes this the default (the test suite sets it)")
    g_tb.add_argument("--serve-only", action="store_true", help="start only the parameter server (ROG_SECRET from your environment)")
    g_tb.add_argument("--port", type=int, default=0, help="parameter-server port (default: any free port)")
    add_option_flags(g_fault, FaultOptions, "faults", "faults")  # --evict-after-s, --ps-checkpoint-every-s, ...
    g_fault.add_argument("--resume-ps", action="store_true",
                   help="--child ps: restart the parameter server from its latest checkpoint in the run folder; "
                        "workers reconnect and re-send what the checkpoint lacks")
    # internal: how the launcher starts its children
    p.add_argument("--child", choices=["ps", "workers", "local-worker", "worker", "prepare"], help=argparse.SUPPRESS)
    p.add_argument("--worker-id", type=int, default=None, help=argparse.SUPPRESS)  # --child worker / local-worker
    p.add_argument("--ps-address", default=None, help=argparse.SUPPRESS)  # --child worker
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--origin", type=float, default=None, help=argparse.SUPPRESS)
    for flags in (SO, STO, SCH, TO):  # policies' options, streams, schedules, codecs' options and injection
        flags.add_arguments(groups)
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check ``scripts/run.py``'s flags; a bad flag exits with one clear line (argparse's status 2)."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.config is not None:  # the recorded flags first: the ones given beside --config come later and win
        a = p.parse_args([*RR.recorded_argv(p, a.config), *(sys.argv[1:] if argv is None else argv)])
    a.flag_values = RR.flag_values(p, a)  # before the checks below rewrite values: config.yaml's ``flags``
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
        if a.workers is not None and not 1 <= a.workers <= n:
            p.error(f"--workers {a.workers}: the hosts file {a.hosts} names {n} worker(s); a run uses at most "
                    f"those (the first --workers by worker_id), so pass --workers 1..{n} or drop it")
        if a.workers is not None:
            a.hosts_file = a.hosts_file.first_workers(a.workers)  # worker ids 0..N-1; the others take no part
        a.workers = a.hosts_file.n_workers
    elif a.hosts is not None and a.child is None:
        p.error("--hosts is for --testbed hosts; add --testbed hosts or drop --hosts")
    if a.workers is None:
        a.workers = DEFAULT_WORKERS
    if a.child == "worker" and (a.worker_id is None or a.worker_id < 0 or not a.ps_address or not a.port):
        p.error("--child worker needs --worker-id K (>= 0), --ps-address ADDRESS and --port PORT")
    from rog.device.choice import check_device_spec

    try:
        check_device_spec(a.device)
    except ValueError as e:
        p.error(str(e))
    for name, flag, low, inclusive in _BOUNDS:  # a flag left out (None) passes
        v = getattr(a, name)
        if v is not None and not ((v >= low if inclusive else v > low) and math.isfinite(v)):
            p.error(f"{flag} must be " + (f">= {low:g}" if inclusive or low else "a positive number") + f", got {v:g}")
    checks = [
        (not (a.dry_run and a.testbed != "hosts"), "--dry-run prints a deployment plan: it needs --testbed hosts --hosts FILE"),
        (not (a.testbed == "hosts" and a.serve_only), "--serve-only runs the parameter server on loopback; drop --testbed hosts"),
        (0 < a.chunk_share <= 1, "--chunk-share must lie in (0, 1] (a fraction of the model's payload, e.g. 0.03)"),
        (a.tcp_slow_start_after_idle is None or (a.testbed in (None, "emulated") and not a.serve_only),
         f"--tcp-slow-start-after-idle sets TCP inside the emulated testbed's namespaces; on --testbed "
         f"{a.testbed or 'loopback'} it would change the host's own setting: drop it, or use --testbed emulated"),
        (not (a.rate_mbit is not None and a.control in ("outdoors", "indoors")),
         "--rate-mbit (a constant rate) and -c outdoors/indoors (a trace) exclude each other; choose one"),
        (not (a.trace is not None and a.control == "none"), "--trace needs a shaped control: drop -c none"),
        (a.trace_format is None or a.trace is not None, "--trace-format names the --trace file's format: give --trace FILE"),
        (not (a.serve_only and a.testbed == "emulated"), "--serve-only runs the parameter server on loopback; drop --testbed emulated"),
        (a.port <= 65535, "--port must lie in [0, 65535]"),
    ]
    for ok, msg in checks:
        if not ok:
            p.error(msg)
    a.checkpoint_workers = _parse_checkpoint_workers(p, a.checkpoint_workers, a.workers)
    try:
        a.compute_ratios = SO.parse_ratios(a.compute_ratios, a.workers)
        for check in (SO.check, STO.check, TO.check, SCH.check_options):  # each module's flags
            check(a)
        options_from(a, FaultOptions, "faults")
    except ConfigError as e:  # a flag module's or a mechanism's Options' check
        p.error(str(e))
    return a


# the numeric flags' bounds: (attribute, flag, the lowest value, whether that value itself is allowed)
_BOUNDS = (("workers", "--workers", 1, True), ("batchsize", "-b/--batchsize", 1, True), ("seed", "--seed", 0, True),
           ("iterations", "--iterations", 1, True), ("time_budget_s", "--budget-s", 0, False), ("port", "--port", 0, True),
           ("epoch", "-e/--epoch", 0, False), ("threshold", "--threshold", 0, True), ("lr", "--lr", 0, False),
           ("rate_mbit", "--rate-mbit", 0, False), ("eval_every", "--eval-every", 1, True),
           ("compute_s", "--compute-s", 0, True), ("checkpoint_every_s", "--checkpoint-every-s", 0, True),
           ("checkpoint_triple_every", "--checkpoint-triple-every", 1, True), ("time_scale", "--time-scale", 0, False),
           ("rate_scale", "--rate-scale", 0, False), ("regime_ratio", "--regime-ratio", 0, False),
           ("cap_mbit", "--cap-mbit", 0, False))


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


def check_before_start(a: argparse.Namespace) -> None:
    """What a run needs from outside its flags, checked before anything starts or any folder is created:
    the result folder can be written, and ``--serve-only`` has a shared secret of at least 16 bytes."""
    from rog.transport.config import load_secret

    from .rundir import check_result_dir

    check_result_dir(a.result_dir)
    if a.serve_only:
        try:
            load_secret()
        except ValueError as e:
            raise ConfigError(f"--serve-only: {e}") from None


def run_command(body, *args) -> int:
    """``body(*args)``'s exit status; a :class:`~rog.errors.ConfigError` from any layer becomes one
    ``run.py: error:`` line on stderr and exit status 2."""
    try:
        return body(*args)
    except ConfigError as e:
        print(f"run.py: error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 2


def main(argv=None, script: str | Path | None = None) -> int:
    """``scripts/run.py``: one child mode (``--child``), the deployment plan (``--dry-run``) or a whole run
    (a bad value: one ``run.py: error:`` line, exit status 2; :func:`run_command`)."""
    return run_command(_main, argv, script)


def _main(argv, script: str | Path | None) -> int:
    from .children import child_local_worker, child_prepare, child_ps, child_worker, child_workers
    from .launch import choose_launcher, launch
    from .rundir import prepare_run_dir

    a = parse_args(argv)
    if a.child is not None:  # one of the launcher's children
        return dict(ps=child_ps, workers=child_workers, prepare=child_prepare, worker=child_worker,
                    **{"local-worker": child_local_worker})[a.child](a)
    check_before_start(a)
    cfg = resolve(a)
    if a.config is not None:
        RR.report_differences(a.config, cfg.to_dict(), file=sys.stderr)
    tb = cfg.testbed
    if tb.fallback_reason:
        from rog.testbed.netns import NO_NETNS_WARNING

        print(NO_NETNS_WARNING.format(reason=tb.fallback_reason), file=sys.stderr, flush=True)
    if cfg.links.cap_mbit is not None and tb.kind != "emulated":
        print("warning: --cap-mbit (the shared-channel cap) is applied by the emulated testbed only; "
              "this loopback run ignores it (config.yaml records cap_applied: false)", file=sys.stderr, flush=True)
    launcher, warning = ("local", None) if a.serve_only else choose_launcher(a.launcher, cfg)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    cfg = cfg.replace(launcher=launcher)  # children read it from config.yaml (the fabric gate, shipped weights)
    if launcher == "fabric":  # remote processes run from the shipped code folder: no relative paths
        cfg = cfg.replace(cache_dir=str(Path(cfg.workload.cache_dir).resolve()))
    if tb.kind == "hosts" and a.dry_run:
        from .launch_fabric import deploy_plan

        print(deploy_plan(cfg, a.hosts_file, a.result_dir).render(), flush=True)
        return 0
    if tb.kind == "hosts":  # refuse before writing or preparing anything
        from rog.deploy.fabric_runner import preflight

        problems = preflight(a.hosts_file)
        if problems:
            print(f"run.py: error: --hosts {a.hosts}: " + "; ".join(" ".join(str(q).split()) for q in problems),
                  file=sys.stderr)  # one line, every problem
            return 2
    run_dir = prepare_run_dir(cfg, a.result_dir, a.overwrite)
    print(f"device: {cfg.device.device} (--device {cfg.device.device_requested})", flush=True)
    return launch(cfg, run_dir, progress=not a.no_progress, serve_only=a.serve_only, port=a.port,
                  command=[*([str(script)] if script else ["-m", RUN_MODULE]), *(sys.argv[1:] if argv is None else argv)], hosts_file=a.hosts_file,
                  json_out=a.json, tensorboard=not a.no_tensorboard)
