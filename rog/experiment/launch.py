"""Which launcher starts a run's processes, and starting it."""

from __future__ import annotations

from pathlib import Path

from rog.errors import ConfigError

from .run_config import RunConfig


def launch(cfg: RunConfig, run_dir: Path, progress: bool, serve_only: bool = False, port: int = 0,
           command: list[str] | None = None, hosts_file=None, json_out: bool = False, tensorboard: bool = True) -> int:
    """Run the experiment with the launcher recorded in ``cfg`` (``--serve-only``: always local);
    returns the command's exit status.  ``json_out``: the JSON summary on stdout even on a terminal
    (:func:`rog.experiment.finalize.report_end`); ``tensorboard``: scalars under ``tb/``."""
    if cfg.testbed.launcher == "fabric" and not serve_only:  # --testbed hosts, and emulated with sshd
        from .launch_fabric import launch_fabric

        return launch_fabric(cfg, run_dir, progress, command, hosts_file, json_out=json_out, tensorboard=tensorboard)
    from .launch_local import launch_local

    return launch_local(cfg, run_dir, progress, serve_only=serve_only, port=port, command=command, json_out=json_out,
                        tensorboard=tensorboard and not serve_only)


def choose_launcher(requested: str | None, cfg: RunConfig) -> tuple[str, str | None]:
    """(launcher, warning or None) for ``--launcher`` on the run's testbed (see the flag's help)."""
    testbed = cfg.testbed.kind
    if testbed == "hosts":
        if requested == "local":
            raise ConfigError("--testbed hosts is deployed over SSH: drop --launcher local")
        return "fabric", None
    if testbed == "loopback":
        if requested == "fabric" and cfg.testbed.testbed_requested != "emulated":
            raise ConfigError("--launcher fabric needs --testbed emulated (sshd in the namespaces) or "
                              "--testbed hosts; loopback runs start their processes here (--launcher local)")
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
        raise ConfigError(f"--launcher fabric: {missing}; {hint}")
    return "local", (f"warning: {missing}, so the emulated testbed runs with --launcher local: processes are started on "
                     f"this machine instead of deployed over SSH as on real devices; {hint}")

