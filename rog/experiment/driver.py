"""Run the paper's evaluation items, then test checkpoints, summarise and draw the figures.

    python scripts/run_items.py                          # every item, quick profile (about 55 min here)
    python scripts/run_items.py outdoors --dry-run       # the plan and its estimated duration only
    python scripts/run_items.py outdoors batch --budget-s 60
    python scripts/run_items.py --traces my_traces/ outdoors
    python scripts/run_items.py --traces my_traces/ --seeds 0,1,2 outdoors --dry-run   # trace x seed replicas
    python scripts/run_items.py --workload cruda outdoors  # CRUDA (ConvMLP-M, 224 px): data in data/
    python scripts/run_items.py --traces my_traces/ --seeds 0,1,2 outdoors --parallel 4   # runs side by side
    python scripts/run_items.py outdoors_long            # the paper's 30 and 60 minutes (900 s runs here)
    python scripts/run_items.py --hosts configs/hosts.yaml   # every run on real devices (rog.experiment.hosts_items)

Items (rog.experiment.items): outdoors (BSP, SSP-4, SSP-20, FLOWN-4, ROG-4, ROG-20, DDP; artifact
replay mode), recorded (the same systems, the record replayed as recorded), batch (x1/x2/x4),
threshold (ROG 4/20/30/40), workers (4/6/8); the sensitivity items run BSP and ROG-4 per setting in
artifact mode.  Every run of an item gets the item's wall-clock budget (run.py --time-budget-s; quick
profile: outdoors 140 s, the others 45 s), on the emulated testbed; a run shared by items runs for the
longest and each item reads it over its own budget.  --budget-s gives every item the same budget.

Without root or working network namespaces every run would fall back from the emulated testbed to
loopback (shaping inside the transport, no kernel queueing): the driver refuses to start (exit 2)
unless ``--allow-loopback`` asks for that; each run's config.yaml and summary.md then name the testbed.

--parallel N: up to N independent runs at once, each in its own slot's namespaces
(rog.experiment.parallel; default N from the cores and the runs' measured CPU use, docs/robustness.md).

Resume: complete runs with the same config are skipped; an incomplete one is moved aside as
``<run-id>.incomplete-<n>`` (kept) and run again from scratch.  Ctrl-C or SIGTERM: every current run
gets the signal once (run.py stops it, restores namespaces and tc, writes INCOMPLETE), nothing
else starts, and the exit status is 130 (143 for SIGTERM); run the same command again to finish
only what is missing.  Afterwards: scripts/test_checkpoints.py on every complete run (tested
checkpoints are skipped), scripts/summarize.py (result/summary.json, summary.md, with one target
per item from result/plan.json) and scripts/plot.py (figure/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from rog.cli_parser import OneLineParser, add_renamed
from rog.experiment import hosts_items as H
from rog.experiment import items as I
from rog.experiment import parallel as P
from rog.experiment import resume as R
from rog.errors import ConfigError
from rog.experiment.config import RUN_MODULE
from rog.experiment.rundir import DONE_FILE, write_atomic
from rog.paths import repo_root

ROOT = repo_root()  # the repository
STOP_GRACE_S = 90.0  # how long a stopped run may take to clean up before its process group is killed
STATUS_EVERY_S = 10.0  # a status line per live run this often (run k/N, elapsed, iterations, stall share, plan left)


WORKLOADS = {"quick": "quick", "cruda": "full"}  # --workload (run.py's names) -> the plan profile (items.PROFILES)


def items_help() -> str:
    """--help's list of every item, default and opt-in, with its run count and duration from the plan."""
    prof = I.PROFILES["quick"]
    lines = ["items (quick workload; `--dry-run ITEM` prints the plan of any choice):"]
    for name in (*I.ITEM_NAMES, *[n for n in I.ITEMS if n not in I.ITEM_NAMES]):
        runs = I.plan_runs([I.ITEMS[name]], prof.workload, prof)
        total = I.estimate_plan_s(runs, prof)["runs_s"]
        budget = prof.budget_for(name)
        lines.append(f"  {name:18s} {'default' if name in I.ITEM_NAMES else 'opt-in':8s} {len(runs):>3} runs x "
                     f"{budget:g} s budget, about {_fmt_s(total)}")
    for name, mod in I.MODULE_ITEMS.items():
        lines.append(f"  {name:18s} {'opt-in':8s} its own steps (python -m {mod} --dry-run)")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = OneLineParser(prog="run_all.sh", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog=items_help() if {"-h", "--help"} & set(argv) else None)
    p.add_argument("items", nargs="*", metavar="ITEM", help=f"items to run (default: {', '.join(I.ITEM_NAMES)}; every item below)")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="quick",
                   help="quick = the quick workload on this machine (default); cruda = the paper's CRUDA (ConvMLP-M, 224 px, "
                        "needs data/), as run.py --workload")
    add_renamed(p, "--profile", "--workload (quick|cruda; --profile full = --workload cruda)", dest="profile_old",
                choices=sorted(I.PROFILES))
    p.add_argument("--traces", default=None, help="run every item once per trace file in DIR (t_s,mbps CSV, 'seconds Mbps' records, "
                                                  "Mahimahi or iperf3 --json)")
    p.add_argument("--trace-format", default=None, help="the --traces files' format: auto (default: by content), csv, record, "
                                                        "mahimahi[:BIN_S] or iperf3")
    p.add_argument("--seeds", default=None,
                   help="run every item once per seed, e.g. 0,1,2 (run ids end in -seed<n>); summary.json 'robustness' "
                        "then reads every claim over the trace x seed replicas (default: seed 0 only). An item that runs "
                        "its own seeds (adsp's) is refused; a module item takes them by its SEEDS_FLAG (scadles: Fig. 6 "
                        "and Table V per seed) or is refused with its reason")
    P.add_parallel_arguments(p)
    H.add_arguments(p)  # --hosts FILE: every run on real devices (rog.experiment.hosts_items)
    p.add_argument("--budget-s", type=float, default=None, help="wall-clock budget of every run of every item in seconds (default: the profile's, per item)")
    p.add_argument("--runs", action="append", default=None, metavar="GLOB",
                   help="plan only the items' runs whose run id matches GLOB (shell-style, as summarize.py and plot.py; "
                        "repeatable), e.g. 'ROG4-*' (default: every run of the items)")
    p.add_argument("--runs-regex", default=None, metavar="REGEX",
                   help="the same with a Python regular expression (re.search), e.g. '^(BSP|ROG4)-.*-seed1-'")
    p.add_argument("--dry-run", action="store_true", help="print the plan (runs, decisions, estimated time) and exit")
    p.add_argument("--allow-loopback", action="store_true",
                   help="without root or network namespaces, run on the loopback testbed (shaping inside the transport) "
                        "instead of refusing to start; summary.md names the testbed and the reason")
    p.add_argument("--result-dir", default=str(ROOT / "result"), help="run folders, summary.json/.md, plan.json (default result/)")
    p.add_argument("--figure-dir", default=str(ROOT / "figure"), help="figures (default figure/)")
    p.add_argument("--cache-dir", default=None, help="pre-trained weights cache of every run (default: run.py's, <result-dir>/.cache)")
    p.add_argument("--run-py", default=None, help=argparse.SUPPRESS)  # tests: a fake run command (default: python -m rog.experiment)
    p.add_argument("--no-post", action="store_true", help=argparse.SUPPRESS)  # tests: runs only (no testing/summary/figures)
    p.add_argument("--post-only", action="store_true",
                   help="start no run: test checkpoints, summarise and draw from the complete runs of the plan")
    a = p.parse_args(argv)
    a.profile = getattr(a, "profile_old", None) or WORKLOADS[a.workload]
    if a.budget_s is not None and not (a.budget_s > 0 and a.budget_s < float("inf")):
        p.error("--budget-s must be a positive number of seconds")
    try:
        a.runs_re = re.compile(a.runs_regex) if a.runs_regex is not None else None
    except re.error as e:
        p.error(f"--runs-regex {a.runs_regex!r} is not a regular expression ({e}); e.g. --runs-regex '^(BSP|ROG4)-'")
    if Path(a.figure_dir).resolve() == Path(a.result_dir).resolve():
        p.error("--figure-dir must differ from --result-dir")
    try:
        if a.trace_format is not None and a.traces is None:
            raise ValueError("--trace-format names the --traces files' format: give --traces DIR")
        a.trace_files = trace_files(a.traces, a.trace_format) if a.traces else None
        a.seed_list = I.parse_seeds(a.seeds) if a.seeds is not None else None
        a.item_list = I.items_for(a.items, a.trace_files, a.seed_list, a.trace_format)
        a.module_seed_args = {n: I.module_item_seeds(n, a.seed_list) if a.seed_list else []
                              for n in dict.fromkeys(a.items) if n in I.MODULE_ITEMS}
        if a.trace_files and a.module_seed_args:
            raise ValueError(f"--traces: item {next(iter(a.module_seed_args))!r} runs its own steps on its own traces; "
                             "run it without --traces")
        P.check_parallel(a.parallel)
    except ValueError as e:
        p.error(str(e))
    why = H.check_arguments(a, I.MODULE_ITEMS)
    if why:
        p.error(why)
    return a


TRACE_SUFFIXES = (".csv", ".txt", ".log", ".json", ".up", ".down", "")  # Mahimahi names its traces *.up / *.down


def trace_files(folder: str, fmt: str | None = None) -> list[Path]:
    """Every trace file in ``folder`` (the formats rog.traces reads), each checked by loading it (as ``fmt``)."""
    from rog.traces import load_trace

    d = Path(folder)
    if not d.is_dir():
        raise ValueError(f"--traces {folder!r} is not a directory")
    files = sorted(f for f in d.iterdir() if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in TRACE_SUFFIXES)
    if not files:
        raise ValueError(f"--traces {folder!r}: no trace file ({'/'.join(s or 'no suffix' for s in TRACE_SUFFIXES)}) in it")
    for f in files:
        try:
            load_trace(f, fmt=fmt)
        except ValueError as e:
            raise ValueError(f"--traces: {e}") from None
    return files


def loopback_fallback() -> str | None:
    """Why the runs would fall back from the emulated testbed to loopback (None: namespaces work here)."""
    from rog.testbed.netns import root_netns_status

    ok, why = root_netns_status()
    return None if ok else why


def check_full_data() -> str | None:
    """--profile full: None when the CRUDA data can be found, else the workload registry's message."""
    try:
        from rog.workloads.registry import WorkloadConfigError, resolve_workload
    except ImportError as e:  # pragma: no cover - the registry is part of the package
        return f"the CRUDA workload is not available ({e})"
    try:
        resolve_workload("cruda", profile_batch_size=24, root=ROOT)
    except WorkloadConfigError as e:
        return str(e)
    return None


class Driver:
    """Runs child commands one at a time and turns Ctrl-C / SIGTERM into one signal to the current child."""

    def __init__(self, log_path: Path) -> None:
        self.child: subprocess.Popen | None = None
        self.children: list[P.ChildRun] = []  # --parallel: every live run
        self.stop_signal: int | None = None
        self.log_path = log_path

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.stop_signal is not None:
            print(f"\n[run_items] already stopping ({signal.Signals(self.stop_signal).name}); waiting for the run to clean up",
                  file=sys.stderr, flush=True)
            return
        self.stop_signal = signum
        print(f"\n[run_items] {signal.Signals(signum).name}: stopping the current step; nothing else starts",
              file=sys.stderr, flush=True)
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signum)  # run.py: SIGINT -> KeyboardInterrupt, SIGTERM -> _Terminated; both clean up
            except ProcessLookupError:
                pass
        for c in self.children:  # each run stops and restores its own namespaces and tc
            try:
                c.proc.send_signal(signum)
                c.stop_sent_at = time.monotonic()
            except ProcessLookupError:
                pass

    def log(self, text: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}"
        print(f"[run_items] {text}", flush=True)
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def call(self, cmd: list[str], capture: bool = False) -> tuple[int, str]:
        """Run ``cmd`` in its own session (a terminal Ctrl-C reaches only this driver, which forwards it once)."""
        if self.stop_signal is not None:
            return 128 + self.stop_signal, ""
        self.child = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE if capture else None, text=True,
                                      start_new_session=True, stdin=subprocess.DEVNULL)
        out = ""
        try:
            if capture:
                out = self._read_until_exit()
            else:
                self._wait()
        finally:
            rc = self.child.returncode
            self.child = None
        return rc, out

    def _read_until_exit(self) -> str:
        """The child's stdout (run.py prints a few lines, the last a JSON summary), read by a thread so
        that waiting (and killing a stuck child after a stop) never blocks on the pipe."""
        import threading

        assert self.child is not None and self.child.stdout is not None
        chunks: list[str] = []
        stream = self.child.stdout
        reader = threading.Thread(target=lambda: chunks.extend(stream), daemon=True)
        reader.start()
        self._wait()
        reader.join(timeout=5.0)
        return "".join(chunks)

    def _wait(self) -> None:
        assert self.child is not None
        while True:
            try:
                self.child.wait(timeout=1.0)
                return
            except subprocess.TimeoutExpired:
                pass
            if self.stop_signal is not None:
                try:
                    self.child.wait(timeout=STOP_GRACE_S)
                    return
                except subprocess.TimeoutExpired:
                    self.log(f"the stopped step did not exit within {STOP_GRACE_S:g} s: killing its process group")
                    try:
                        os.killpg(self.child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self.child.wait()
                    return


def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"


def main(argv=None) -> int:
    a = parse_args(argv)
    prof = I.PROFILES[a.profile]
    result_dir, figure_dir = Path(a.result_dir), Path(a.figure_dir)
    if a.profile == "full":
        why = check_full_data()
        if why:
            print(f"run_all.sh: {'warning' if a.dry_run else 'error'}: --profile full needs the CRUDA data: {why}",
                  file=sys.stderr)
            if not a.dry_run:
                return 2
    runs = I.plan_runs(a.item_list, prof.workload, prof, a.budget_s)
    if a.runs_re is not None or a.runs:
        from fnmatch import fnmatchcase

        runs = [r for r in runs if (a.runs_re is None or a.runs_re.search(r.run_id))
                and (not a.runs or any(fnmatchcase(r.run_id, g) for g in a.runs))]
        if not runs:
            given = " ".join([*(f"--runs {g!r}" for g in a.runs or ()), *([f"--runs-regex {a.runs_regex!r}"] if a.runs_regex else [])])
            print(f"run_all.sh: error: {given} matches no run of the items {', '.join(it.name for it in a.item_list)}: "
                  "see the run ids with --dry-run (--runs takes shell-style patterns such as 'ROG4-*'; "
                  "--runs-regex a regular expression)", file=sys.stderr)
            return 2
    kept = {r.run_id for r in runs}
    budgets = I.item_budgets(a.item_list, prof, a.budget_s)
    fallback = loopback_fallback() if runs and not a.post_only and a.hosts_file is None else None
    if fallback and not a.allow_loopback and not a.dry_run:
        print(f"run_all.sh: error: the emulated testbed needs root and network namespaces ({fallback}); every run "
              "would fall back to loopback: run as root, or add --allow-loopback to run on loopback", file=sys.stderr)
        return 2
    testbed = "loopback" if fallback else "emulated"  # what run.py will record in every config.yaml

    def child_args(r: I.PlannedRun) -> list[str]:
        """The run.py arguments of a planned run: what its child is given and what resume resolves."""
        args = I.run_args(r.spec, prof, r.budget_s, result_dir, r.items[0], a.hosts)
        return args + (["--cache-dir", a.cache_dir] if a.cache_dir else [])

    decisions = {}
    for r in runs:  # a complete run counts if its config.yaml is the one its child would write now (rog.experiment.resume)
        try:
            decisions[r.run_id] = R.decide(result_dir / r.run_id, lambda r=r: R.planned_config(child_args(r)))
        except ConfigError as e:
            print(f"run_all.sh: error: {r.run_id}: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
    to_run = {rid for rid, d in decisions.items() if d.action != "skip"}
    est = I.estimate_plan_s(runs, prof, to_run)
    full_est = I.estimate_plan_s(runs, prof)

    print(f"plan: profile {a.profile} (workload {prof.workload}), items {', '.join(it.name for it in a.item_list)}, "
          f"budgets {', '.join(f'{n} {b:g} s' for n, b in budgets.items())} (every run of an item; a shared run "
          f"runs for the longest), {len(runs)} distinct runs, {len(to_run)} to run")
    for line in a.skipped_items:
        print(line)
    w_id = max([len("run id")] + [len(r.run_id) for r in runs])  # columns as wide as their longest entry
    w_it = max([len("items")] + [len(",".join(r.items)) for r in runs])
    print(f"{'#':>3}  {'run id':{w_id}s} {'items':{w_it}s} {'budget':>7s} {'action':6s} {'est':>7s}  why")
    for k, r in enumerate(runs, 1):
        d = decisions[r.run_id]
        e = I.estimate_run_s(r.spec, r.budget_s) if d.action != "skip" else 0.0
        print(f"{k:>3}  {r.run_id:{w_id}s} {','.join(r.items):{w_it}s} {r.budget_s:>6g}s {d.action:6s} {e:>6.0f}s  {d.why}")
    print(f"results: {result_dir}/<run id>/ (tensorboard --logdir {result_dir}), {result_dir}/summary.md; "
          f"figures: {figure_dir}/")
    print(f"estimate: runs {_fmt_s(est['runs_s'])} + checkpoint tests {_fmt_s(est['ckpt_s'])} + summary and figures "
          f"{_fmt_s(est['post_s'])} = {_fmt_s(est['total_s'])} (from scratch: {_fmt_s(full_est['total_s'])}; "
          f"start-up {I.STARTUP_S:g} s + {I.STARTUP_PER_WORKER_S:g} s/worker and {I.TAIL_S:g} s tail per run "
          f"({I.DDP_TAIL_S:g} s for DDP), measured here)")
    n_par, par_why = P.default_parallel(a.parallel, result_dir, [r.spec.workers for r in runs])
    if a.hosts_file is not None:
        n_par, par_why = 1, f"one run at a time on the devices of {a.hosts}"
    runs_at_n = P.estimate_at([I.estimate_run_s(r.spec, r.budget_s) for r in runs if r.run_id in to_run], n_par)
    print(f"parallel: {par_why}; runs side by side: {_fmt_s(runs_at_n)}, plan "
          f"{_fmt_s(runs_at_n + est['ckpt_s'] + est['post_s'])} at N = {n_par}")
    if fallback:
        print(f"testbed: loopback ({'--allow-loopback' if a.allow_loopback else 'refused without --allow-loopback'}): "
              f"the emulated testbed needs root and network namespaces ({fallback})")
    for mod in I.paper_item_modules().values():  # a paper's own plan lines (e.g. the long item's trace passes)
        for line in (mod.plan_lines(a.item_list, budgets, a.profile) if hasattr(mod, "plan_lines") else ()):
            print(line)
    if a.trace_files or a.seed_list:
        n_t, n_s = len(a.trace_files or [None]), len(a.seed_list or [0])
        print(f"replicas: {n_t} trace(s) x {n_s} seed(s) = {n_t * n_s} per item; every claim is read per replica "
              f"(summary.json 'robustness': holds on k of n, median, min-max)")
    default_plan = (not a.items and a.profile == "quick" and a.budget_s is None and a.traces is None
                    and a.seeds is None)
    if default_plan and full_est["total_s"] > I.DEADLINE_S:
        print(f"warning: the default plan is estimated at {_fmt_s(full_est['total_s'])}, over {_fmt_s(I.DEADLINE_S)}",
              file=sys.stderr)
    module_items = [n for n in dict.fromkeys(a.items) if n in I.MODULE_ITEMS]
    for name in module_items:  # items with their own module (items.MODULE_ITEMS), run after the runs
        print(f"item {name}: python -m {' '.join([I.MODULE_ITEMS[name], *a.module_seed_args[name]])} (its own steps)")
    if a.dry_run and a.hosts_file is not None:
        H.print_deploy_plans([(r.run_id, child_args(r)) for r in runs
                              if r.run_id in to_run], result_dir)
    if a.dry_run:
        for name in module_items:
            subprocess.call([sys.executable, "-m", I.MODULE_ITEMS[name], "--result-dir", str(result_dir), "--dry-run",
                             *a.module_seed_args[name]], cwd=str(ROOT))
        return 0

    result_dir.mkdir(parents=True, exist_ok=True)
    drv = Driver(result_dir / "run_items.log")
    drv.install()
    plan_doc = dict(profile=a.profile, workload=prof.workload, budgets_s=budgets,
                    run_budgets_s={r.run_id: r.budget_s for r in runs},
                    items={it.name: [i for i in (I.run_id(s, prof.workload) for s in it.runs) if i in kept]
                           for it in a.item_list},
                    about={it.name: it.about for it in a.item_list}, estimate_s=full_est,
                    testbed=testbed if a.hosts_file is None else "hosts", hosts=a.hosts,
                    skipped_items=a.skipped_items)
    _write_json(result_dir / "plan.json", plan_doc)
    t_begin = time.monotonic()
    drv.log(f"start: {len(to_run)} run(s) to do, estimate {_fmt_s(est['total_s'])}")
    failed: list[str] = []
    todo = [(k, r) for k, r in enumerate(runs, 1) if decisions[r.run_id].action != "skip"]
    if a.post_only:
        failed += [r.run_id for _, r in todo]
        todo = []

    def prepare(job) -> list[str]:
        k, r = job
        d, run_dir = decisions[r.run_id], result_dir / r.run_id
        if d.action == "rerun" and run_dir.exists():
            dest = R.set_aside(run_dir, d.aside_as or "incomplete")
            drv.log(f"{r.run_id}: {d.why}; moved aside as {dest.name}")
        args = child_args(r)
        drv.log(f"[{k}/{len(runs)}] {r.run_id} (items {','.join(r.items)}): budget {r.budget_s:g} s, estimate {I.estimate_run_s(r.spec, r.budget_s):.0f} s")
        return [sys.executable, *([a.run_py] if a.run_py else ["-m", RUN_MODULE]), *args]

    def finish(job, rc: int, out: str, took: float, cpu_s: float, busy: tuple) -> None:
        r = job[1]
        last = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            summ = json.loads(last)
        except ValueError:
            summ = {}
        status = "done" if (result_dir / r.run_id / DONE_FILE).exists() else "INCOMPLETE"
        drv.log(f"{r.run_id}: {status} (exit {rc}) in {took:.0f} s, {cpu_s:.0f} CPU s (busy cores: peak {_short(busy[0])}, p90 {_short(busy[1])}; machine busy {_short(busy[2])}); iterations {summ.get('iterations')}, "
                f"stall {_short(summ.get('mean_stall_s'))} s/it, final accuracy {_short(summ.get('final_accuracy'))}")
        P.record_cpu(result_dir, r.run_id, cpu_s, took, r.spec.workers, n_par, *busy)
        if status != "done":
            failed.append(r.run_id)
            why = _incomplete_why(result_dir / r.run_id)
            if why:
                drv.log(f"{r.run_id}: INCOMPLETE: {why}")

    if n_par > 1:
        drv.log(f"running up to {n_par} runs side by side ({par_why})")
    status = PlanStatus(result_dir, todo, len(runs), n_par, est["ckpt_s"] + est["post_s"])
    _run_parallel(drv, todo, n_par, prepare, finish, status)
    if drv.stop_signal is not None:
        return _stopped(drv, runs, result_dir)

    done_dirs = [str(result_dir / r.run_id) for r in runs if (result_dir / r.run_id / DONE_FILE).exists()]
    if done_dirs and not a.no_post:
        drv.log(f"testing the checkpoints of {len(done_dirs)} run(s) (scripts/test_checkpoints.py; tested ones are skipped)")
        rc, _ = drv.call([sys.executable, "-m", "rog.checkpoint_accuracy", "--worker", "all", *done_dirs],
                         capture=True)
        if drv.stop_signal is not None:
            return _stopped(drv, runs, result_dir)
        if rc != 0:
            drv.log(f"checkpoint testing exited {rc}: see the messages above")
        patterns = []
        for r in runs:
            patterns += ["--runs", r.run_id]
        rc_s, _ = drv.call([sys.executable, "-m", "rog.analysis.summarize_command", "--result-dir", str(result_dir),
                            "--plan", str(result_dir / "plan.json"), *patterns])
        rc_p, _ = drv.call([sys.executable, "-m", "rog.analysis.plot_command", "--result-dir", str(result_dir),
                            "--figure-dir", str(figure_dir), "--plan", str(result_dir / "plan.json"), *patterns])
        if drv.stop_signal is not None:
            return _stopped(drv, runs, result_dir)
        if rc_s or rc_p:
            drv.log(f"summarize.py exited {rc_s}, plot.py exited {rc_p}")
            failed.append("summary/figures")
    for name in module_items:
        rc_m, _ = drv.call([sys.executable, "-m", I.MODULE_ITEMS[name], "--result-dir", str(result_dir),
                            "--figure-dir", str(figure_dir), *a.module_seed_args[name]])
        if drv.stop_signal is not None:
            return _stopped(drv, runs, result_dir)
        if rc_m:
            failed.append(name)
    drv.log(f"finished in {_fmt_s(time.monotonic() - t_begin)}: {len(done_dirs)}/{len(runs)} runs complete"
            + (f"; not complete: {', '.join(failed)} (run again to retry)" if failed else ""))
    return 1 if failed else 0


class PlanStatus:
    """``run_all.sh``'s status line: every :data:`STATUS_EVERY_S`, per live run ``run k/N <id>: elapsed/budget,
    iterations, stall share`` (:class:`rog.experiment.progress.Progress` on its event logs), then the plan's
    remaining time (the live runs' remaining estimates and the runs not started, over the slots, plus
    checkpoint tests, summary and figures)."""

    def __init__(self, result_dir: Path, todo, n_runs: int, n_par: int, after_s: float, clock=time.monotonic,
                 out=None) -> None:
        self.result_dir, self.n_runs, self.n_par, self.after_s, self.clock = result_dir, n_runs, n_par, after_s, clock
        self.est = {r.run_id: I.estimate_run_s(r.spec, r.budget_s) for _, r in todo}
        self.pending = [r.run_id for _, r in todo]
        self.started: dict[str, tuple[float, object]] = {}  # run id -> (start, Progress)
        self.last = clock()
        self.out = out

    def tick(self, live: dict) -> None:
        """Called every driver round with the live runs (``{slot: ((k, run), handle)}``)."""
        from .progress import Progress

        now = self.clock()
        for (k, r), _ in live.values():
            if r.run_id not in self.started:
                self.started[r.run_id] = (now, Progress(self.result_dir / r.run_id, r.spec.workers))
                self.pending = [i for i in self.pending if i != r.run_id]
        if now - self.last < STATUS_EVERY_S:
            return
        self.last = now
        live_ids = {r.run_id for (_, r), _ in live.values()}
        left = []
        for (k, r), _ in sorted(live.values(), key=lambda x: x[0][0]):
            t0, prog = self.started[r.run_id]
            prog.update()
            left.append(max(0.0, self.est[r.run_id] - (now - t0)))
            print(f"[run_all] run {k}/{self.n_runs} {r.run_id}: {now - t0:.0f} s of about {self.est[r.run_id]:.0f} s "
                  f"(budget {r.budget_s:g} s), {prog.status()}", file=self.out or sys.stdout, flush=True)
        rest = P.estimate_at(left + [self.est[i] for i in self.pending if i not in live_ids], self.n_par)
        print(f"[run_all] plan: about {_fmt_s(rest + self.after_s)} left ({len(self.pending)} run(s) not started; "
              "checkpoint tests, summary and figures after)", file=self.out or sys.stdout, flush=True)


def _run_parallel(drv: Driver, todo, n: int, prepare, finish, status: PlanStatus | None = None) -> None:
    """The runs of ``todo`` side by side in ``n`` slots (:func:`rog.experiment.parallel.run_slots`), each
    with its slot's testbed prefix tag; a stop reaches every live run (:meth:`Driver._on_signal`)."""
    def start(job, slot: int):
        cmd = prepare(job)
        c = P.start_child(cmd, str(ROOT), slot)
        drv.children.append(c)
        drv.log(f"{job[1].run_id}: slot {slot}, testbed prefix tag {P.slot_tag(slot)}")
        return c

    def done(job, slot: int, res) -> None:
        drv.children[:] = [c for c in drv.children if c.proc.returncode is None]
        finish(job, *res)

    P.run_slots(todo, n, start, lambda c: P.poll_child(c, STOP_GRACE_S), done,
                stopping=lambda: drv.stop_signal is not None, on_tick=None if status is None else status.tick)


def _incomplete_why(run_dir: Path) -> str:
    """The first line of a run's INCOMPLETE marker (what stopped it; e.g. the host that became unreachable)."""
    from rog.experiment.rundir import INCOMPLETE_FILE

    try:
        lines = (run_dir / INCOMPLETE_FILE).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[0][:300] if lines else ""


def _short(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _stopped(drv: Driver, runs, result_dir: Path) -> int:
    missing = [r.run_id for r in runs if not (result_dir / r.run_id / DONE_FILE).exists()]
    drv.log(f"stopped by {signal.Signals(drv.stop_signal).name}: {len(missing)} run(s) not complete "
            f"({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}); run the same command again to finish them")
    return 128 + int(drv.stop_signal)


def _write_json(path: Path, doc: dict) -> None:
    write_atomic(path, json.dumps(doc, indent=2) + "\n")
