"""The emulated run with GPU workers: the ``outdoors`` item's ROG-4 and BSP with ``--device``, both launchers.

``python scripts/run_gpu_emulated.py`` runs, for every launcher (``local``, ``fabric``) and every device
of ``--devices`` (``cuda`` by default; ``cuda,cpu`` adds the same runs on CPU workers to compare), the
two runs on the emulated testbed with the item's own flags (:func:`rog.experiment.items.run_args`),
tests their checkpoints (``scripts/test_checkpoints.py``) and prints, per run, DONE or not and the
seconds per iteration split into computation, communication and stall; JSON on the last line.

The testbed needs ``ip`` and ``tc``.  A host without them (a bare GPU image) gets them from Debian's
iproute2 packages: ``--iproute2-debs DIR`` holds the ``.deb`` files of :data:`IPROUTE2_PACKAGES`
(``apt-get download`` them on a Debian 12 machine); they are unpacked with ``dpkg -x`` into a temporary
folder and the runs get its ``bin``/``sbin`` folders first on ``PATH`` and its library folders on
``LD_LIBRARY_PATH``.  The script says which ``ip`` and ``tc`` it used.  Without CUDA it refuses to
start unless the devices asked for are ``cpu``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rog.paths import repo_root

from . import items as I
from .config import RUN_MODULE
from .rundir import DONE_FILE

ROOT = repo_root()
IPROUTE2_PACKAGES = ("iproute2", "libmnl0", "libxtables12", "libbpf1", "libelf1", "libcap2")
SYSTEMS = ("ROG-4", "BSP")  # the outdoors item's runs this command makes
LAUNCHERS = ("local", "fabric")
DEFAULT_BUDGET_S = 60.0
_BIN_DIRS = ("usr/sbin", "usr/bin", "sbin", "bin")


@dataclass
class Iproute2:
    """Where ``ip`` and ``tc`` come from, and the environment that makes them the ones found."""

    ip: str
    tc: str
    source: str  # "host" or the folder of .deb files
    path_dirs: list[str] = field(default_factory=list)  # put first on PATH
    lib_dirs: list[str] = field(default_factory=list)  # LD_LIBRARY_PATH

    def env(self, base: dict | None = None) -> dict:
        """``base`` (default: this process's environment) with the tools' folders first."""
        env = dict(os.environ if base is None else base)
        if self.path_dirs:
            env["PATH"] = os.pathsep.join(self.path_dirs + [p for p in [env.get("PATH", "")] if p])
        if self.lib_dirs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(self.lib_dirs + [p for p in [env.get("LD_LIBRARY_PATH", "")] if p])
        return env


def find_tools(tree: Path) -> Iproute2:
    """``ip`` and ``tc`` in an unpacked package tree (``usr/sbin``, ``usr/bin``, ``sbin``, ``bin``), those
    folders for PATH (other unpacked packages' programs, e.g. an ``sshd``, are found there too) and every
    folder of shared libraries under it; ValueError naming what is missing."""
    tree = Path(tree)
    found: dict[str, Path] = {}
    path_dirs: list[str] = []
    for rel in _BIN_DIRS:
        d = tree / rel
        for name in ("ip", "tc"):
            p = d / name
            if name not in found and p.is_file() and os.access(p, os.X_OK):
                found[name] = p
                if str(d) not in path_dirs:
                    path_dirs.append(str(d))
    missing = [n for n in ("ip", "tc") if n not in found]
    if missing:
        raise ValueError(f"{tree}: no executable {' or '.join(missing)} under {', '.join(_BIN_DIRS)} "
                         f"(are the iproute2 .deb files complete? needed: {', '.join(IPROUTE2_PACKAGES)})")
    path_dirs += [str(tree / r) for r in _BIN_DIRS if (tree / r).is_dir() and str(tree / r) not in path_dirs]
    lib_dirs = sorted({str(p.parent) for p in tree.rglob("*.so*") if p.is_file() or p.is_symlink()})
    return Iproute2(str(found["ip"]), str(found["tc"]), str(tree), path_dirs, lib_dirs)


def extract_debs(deb_dir: Path, dest: Path) -> list[Path]:
    """Unpack every ``.deb`` of ``deb_dir`` into ``dest`` with ``dpkg -x`` (``dpkg-deb -x``); returns them."""
    debs = sorted(Path(deb_dir).glob("*.deb"))
    if not debs:
        raise ValueError(f"--iproute2-debs {deb_dir}: no .deb files there; on a Debian 12 machine run "
                         f"`apt-get download {' '.join(IPROUTE2_PACKAGES)}` into it")
    names = {d.name.split("_", 1)[0] for d in debs}
    lacking = [p for p in IPROUTE2_PACKAGES if p not in names]
    if lacking:
        raise ValueError(f"--iproute2-debs {deb_dir}: missing {', '.join(lacking)} (apt-get download {' '.join(lacking)})")
    tool = shutil.which("dpkg") or shutil.which("dpkg-deb")
    if tool is None:
        raise ValueError("neither dpkg nor dpkg-deb is installed: cannot unpack the iproute2 .deb files")
    for d in debs:
        subprocess.run([tool, "-x", str(d), str(dest)], check=True, capture_output=True)
    return debs


def choose_iproute2(deb_dir: str | None, scratch: Path) -> Iproute2:
    """The host's ``ip``/``tc`` when both are on PATH and no ``deb_dir`` is given, else the unpacked packages'."""
    if deb_dir is None:
        ip, tc = shutil.which("ip"), shutil.which("tc")
        if ip and tc:
            return Iproute2(ip, tc, "host")
        raise ValueError("this host has no `ip`/`tc` (iproute2): pass --iproute2-debs DIR with the .deb files of "
                         f"{', '.join(IPROUTE2_PACKAGES)} (apt-get download them on a Debian 12 machine)")
    extract_debs(Path(deb_dir), scratch)
    tools = find_tools(scratch)
    tools.source = str(deb_dir)
    return tools


def tool_version(path: str, env: dict) -> str:
    """The first line ``PATH -V`` prints (it also proves the binary loads its libraries), or why it failed."""
    try:
        p = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=10, env=env)
    except OSError as e:
        return f"does not start: {e}"
    text = (p.stdout or p.stderr).strip().splitlines()
    return (text[0] if text else "") if p.returncode == 0 else f"exit {p.returncode}: {' '.join(text)[:200]}"


def check_devices(devices: list[str]) -> str | None:
    """Why these devices cannot be used here (a CUDA device asked for, none present), or None."""
    from rog.device.choice import check_device_spec, nvidia_driver_present

    for d in devices:
        check_device_spec(d, "--devices")
    if all(d == "cpu" for d in devices):
        return None
    if not nvidia_driver_present():
        return "no NVIDIA driver on this machine"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (cuda {torch.version.cuda}) sees no CUDA device"
    return None


@dataclass
class PlannedRun:
    """One run.py call: its launcher, device, system and arguments."""

    launcher: str
    device: str
    system: str
    result_dir: Path
    run_id: str
    args: list[str]


def plan(devices: list[str], launchers: list[str], budget_s: float, result_dir: Path, cache_dir: str | None = None,
         profile: str = "quick") -> list[PlannedRun]:
    """The runs, device by device and launcher by launcher: the outdoors item's ROG-4 and BSP, each in
    ``result_dir/<device>-<launcher>/`` (run ids are the item's)."""
    prof = I.PROFILES[profile]
    specs = [s for s in I.ITEMS["outdoors"].runs if s.system in SYSTEMS]
    specs.sort(key=lambda s: SYSTEMS.index(s.system))
    out = []
    for device in devices:
        for launcher in launchers:
            d = Path(result_dir) / f"{device.replace(':', '')}-{launcher}"
            for s in specs:
                args = I.run_args(s, prof, budget_s, d, "outdoors") + ["--device", device, "--launcher", launcher]
                args += ["--cache-dir", str(cache_dir)] if cache_dir else []
                out.append(PlannedRun(launcher, device, s.system, d, I.run_id(s, prof.workload), args))
    return out


def split_line(summary: dict) -> str:
    """Seconds per iteration: computation / communication / stall, from run.py's summary."""
    def f(k):
        v = summary.get(k)
        return "-" if v is None else f"{v:.3f}"
    return (f"compute {f('mean_compute_s')} + communication {f('mean_comm_s')} + stall {f('mean_stall_s')} "
            f"s/iteration over {summary.get('iterations')} iterations (compute less the profile's pacing sleep: "
            f"{f('mean_compute_work_s')} s)")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="cuda", help="comma-separated run.py --device values (default cuda; "
                                                       "cuda,cpu adds the same runs on CPU workers)")
    p.add_argument("--launchers", default=",".join(LAUNCHERS), help="comma-separated: local, fabric (default both)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help=f"wall-clock budget of every run (default {DEFAULT_BUDGET_S:g} s)")
    p.add_argument("--result-dir", default=str(ROOT / "result" / "gpu_emulated"))
    p.add_argument("--cache-dir", default=str(ROOT / "result" / ".cache"),
                   help="pre-trained weights cache shared by every run (default result/.cache, run_all.sh's)")
    p.add_argument("--iproute2-debs", default=None, metavar="DIR",
                   help=f"folder of the .deb files of {', '.join(IPROUTE2_PACKAGES)}: use their ip/tc (default: "
                        "the host's, which must exist)")
    p.add_argument("--dry-run", action="store_true", help="print the ip/tc to use and the commands, run nothing")
    a = p.parse_args(argv)
    a.device_list = [d.strip() for d in a.devices.split(",") if d.strip()]
    a.launcher_list = [x.strip() for x in a.launchers.split(",") if x.strip()]
    bad = [x for x in a.launcher_list if x not in LAUNCHERS]
    if bad or not a.launcher_list:
        p.error(f"--launchers {a.launchers!r}: choose from {', '.join(LAUNCHERS)}")
    if not a.device_list:
        p.error("--devices: name at least one device")
    if not a.budget_s > 0:
        p.error("--budget-s must be positive")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        why = check_devices(a.device_list)
    except ValueError as e:
        print(f"run_gpu_emulated.py: error: {e}", file=sys.stderr)
        return 2
    if why is not None:
        print(f"run_gpu_emulated.py: error: --devices {a.devices}: {why}; pass --devices cpu to run the same "
              "commands on CPU workers", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rog-iproute2-") as scratch:
        try:
            tools = choose_iproute2(a.iproute2_debs, Path(scratch))
        except (ValueError, subprocess.CalledProcessError) as e:
            print(f"run_gpu_emulated.py: error: {e}", file=sys.stderr)
            return 2
        env = tools.env()
        used = {"source": tools.source, "ip": tools.ip, "tc": tools.tc, "ip_version": tool_version(tools.ip, env),
                "tc_version": tool_version(tools.tc, env), "ld_library_path": tools.lib_dirs}
        print(f"ip: {tools.ip} ({used['ip_version']}); tc: {tools.tc} ({used['tc_version']}); from {tools.source}",
              flush=True)
        runs = plan(a.device_list, a.launcher_list, a.budget_s, Path(a.result_dir), a.cache_dir)
        for r in runs:
            print(f"[{r.device} {r.launcher} {r.system}] {sys.executable} -m {RUN_MODULE} {' '.join(r.args)}", flush=True)
        if a.dry_run:
            planned = [{**vars(r), "result_dir": str(r.result_dir)} for r in runs]
            print(json.dumps({"dry_run": True, "iproute2": used, "runs": planned}))
            return 0
        if "fabric" in a.launcher_list:
            from rog.testbed.sshd_setup import main as setup_sshd

            setup_sshd()  # installs sshd when missing (as scripts/setup_sshd.sh); the runs say if it is still missing
        return _run_all(runs, env, used)


def _run_all(runs: list[PlannedRun], env: dict, used: dict) -> int:
    results = []
    for r in runs:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", RUN_MODULE, *r.args, "--overwrite"], capture_output=True,
                           text=True, env=env, cwd=str(ROOT))
        took = time.monotonic() - t0
        try:
            summary = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            summary = {}
        run_dir = r.result_dir / r.run_id
        done = (run_dir / DONE_FILE).exists()
        print(f"[{r.device} {r.launcher} {r.system}] {'DONE' if done else 'NOT DONE'} (exit {p.returncode}) in "
              f"{took:.0f} s: {split_line(summary)}", flush=True)
        if not done:
            sys.stderr.write(p.stderr[-3000:])
        results.append(dict(device=r.device, launcher=r.launcher, system=r.system, run_dir=str(run_dir), done=done,
                            exit=p.returncode, wall_s=round(took, 1), summary=summary))
    done_dirs = [x["run_dir"] for x in results if x["done"]]
    tested = 0
    if done_dirs:
        c = subprocess.run([sys.executable, "-m", "rog.checkpoint_accuracy", "--worker", "all", *done_dirs],
                           env=env, cwd=str(ROOT))
        for x in results:
            x["checkpoints_tested"] = x["done"] and (Path(x["run_dir"]) / "accuracy.csv").exists()
        tested = sum(x["checkpoints_tested"] for x in results)
        print(f"checkpoints tested (exit {c.returncode}): {tested} of {len(results)} runs have accuracy.csv")
    ok = all(x["done"] and x.get("checkpoints_tested") for x in results)
    print(json.dumps({"ok": ok, "iproute2": used, "runs": results}))
    return 0 if ok else 1
