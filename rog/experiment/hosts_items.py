"""The whole evaluation on real devices: ``scripts/run_items.py --hosts FILE`` (``bash scripts/run_all.sh --hosts FILE``).

Every planned run becomes ``scripts/run.py --testbed hosts --hosts FILE`` (the Fabric launcher of
:mod:`rog.experiment.launch_fabric`), one run after another on the same devices, with the same run
ids, resume rule (``config.yaml`` must say ``testbed: hosts`` and name the same worker hosts) and
post-processing as on the emulated testbed.  A run of N workers uses the PS and the first N workers
of the file by worker id; an item that needs more workers than the file names is skipped with one
line saying so.  ``--dry-run`` adds each run's deployment plan (steps per phase; the first run's in
full) to the plan, built exactly as ``run.py --dry-run`` builds it, without connecting anywhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

__all__ = ["add_arguments", "check_arguments", "items_on_hosts", "deploy_plan_of", "print_deploy_plans"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--hosts FILE``: run every item on the hosts file's devices (``--testbed hosts``)."""
    p.add_argument("--hosts", default=None, metavar="FILE",
                   help="run every item on the real devices of this hosts file through the Fabric launcher "
                        "(run.py --testbed hosts --hosts FILE; see configs/hosts.example.yaml); a run of N workers "
                        "uses the PS and the first N workers by worker_id; items needing more workers are skipped")


def check_arguments(a: argparse.Namespace, module_items: dict) -> str | None:
    """Load ``--hosts`` into ``a.hosts_file`` (None without it) and keep the items the devices can run
    (``a.item_list``; ``a.skipped_items``: one line per item left out).  Returns an error message or None."""
    a.hosts_file, a.skipped_items = None, []
    if a.hosts is None:
        return None
    from rog.deploy.hosts import HostsFileError, load_hosts

    try:
        a.hosts_file = load_hosts(a.hosts)
    except HostsFileError as e:
        return f"--hosts: {e}"
    a.hosts = str(Path(a.hosts).resolve())  # run.py is started from the repository root
    local = [n for n in a.items if n in module_items]
    if local:
        return (f"--hosts: item(s) {', '.join(local)} run on this machine by their own module, not on the devices; "
                f"run them without --hosts")
    if a.parallel is not None and a.parallel != 1:
        return "--hosts: the runs share one set of devices, so they run one after another; drop --parallel"
    a.item_list, a.skipped_items = items_on_hosts(a.item_list, a.hosts_file.n_workers, a.hosts)
    if not a.item_list:
        return "--hosts: no item fits the hosts file's workers:\n  " + "\n  ".join(a.skipped_items)
    return None


def items_on_hosts(items: Sequence, n_workers: int, source: str) -> tuple[list, list[str]]:
    """The items whose every run fits ``n_workers`` devices, and one line per item left out."""
    kept, skipped = [], []
    for it in items:
        need = max(r.workers for r in it.runs)
        if need > n_workers:
            skipped.append(f"skip item {it.name}: its runs need up to {need} workers, the hosts file {source} "
                           f"names {n_workers} (add worker hosts to run it)")
        else:
            kept.append(it)
    return kept, skipped


def deploy_plan_of(run_argv: list[str], result_dir: Path):
    """The :class:`rog.deploy.plan.Plan` ``run.py <run_argv> --dry-run`` would print (no connection, no
    file written): the run's flags parsed and resolved by run.py's own code."""
    from . import cli
    from .config import resolve
    from .launch_fabric import deploy_plan

    a = cli.parse_args([*run_argv, "--dry-run"])
    cfg = resolve(a)
    cfg = cfg.replace(launcher="fabric", cache_dir=str(Path(cfg.workload.cache_dir).resolve()))
    return deploy_plan(cfg, a.hosts_file, str(result_dir))


def print_deploy_plans(planned: list[tuple[str, list[str]]], result_dir: Path) -> dict:
    """``--dry-run --hosts``: each run's deployment steps per phase (the first run's plan in full).
    ``planned``: (run id, run.py arguments).  Returns {"runs": n, "steps": total, "per_run": {id: n}}."""
    from rog.deploy.plan import PHASES

    from .config import ConfigError

    total, per_run = 0, {}
    for k, (rid, argv) in enumerate(planned):
        try:
            plan = deploy_plan_of(argv, result_dir)
        except ConfigError as e:
            print(f"deploy {rid}: error: {e}")
            continue
        if k == 0:
            print(plan.render())
        counts = {ph: len(plan.phase(ph)) for ph in PHASES}
        n = sum(counts.values())
        total, per_run[rid] = total + n, n
        print(f"deploy {rid}: {n} steps on {len(plan.hosts.hosts)} hosts ("
              + ", ".join(f"{ph} {c}" for ph, c in counts.items() if c) + ")")
    print(f"deployment: {len(per_run)} run(s), {total} steps in all (python scripts/run.py ... --dry-run prints "
          f"any run's plan in full); the estimate's start-up terms were measured on the emulated testbed: on "
          f"devices, copying the code and starting containers add to them")
    return dict(runs=len(per_run), steps=total, per_run=per_run)
