"""``manifest.json``: what ran, where, on which code and data, and how it ended.

Fields: ``code`` (``git describe --always --dirty`` and the commit, when the repository is a git
checkout), ``command`` (argv), ``testbed`` and ``hosts`` (namespaces and addresses per device),
``traces`` (path and SHA-256 of every trace replayed), ``start`` / ``end`` (Unix seconds and
ISO 8601 UTC), ``exit_status`` (``done`` / ``incomplete`` with the reason), ``platform``
(Python, kernel), plus whatever the caller adds (replay statistics, leftovers after cleanup).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from .rundir import MANIFEST_FILE, write_atomic

__all__ = ["code_version", "iso_utc", "write_manifest"]


def code_version(repo: str | Path) -> dict:
    """``{"describe", "commit", "dirty"}`` from git, or ``{"error": ...}`` when unavailable."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        describe = git("describe", "--always", "--dirty")
        return {"describe": describe, "commit": git("rev-parse", "HEAD"), "dirty": describe.endswith("-dirty")}
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"no git version: {e}"}


def iso_utc(unix_s: float | None) -> str | None:
    """ISO 8601 UTC of a Unix time."""
    return None if unix_s is None else datetime.fromtimestamp(unix_s, tz=timezone.utc).isoformat()


def write_manifest(run_dir: str | Path, *, repo: str | Path, command: list[str], testbed: str, hosts: dict,
                   traces: list[dict], start_unix_s: float, end_unix_s: float | None, status: str,
                   reason: str = "", **extra) -> dict:
    """Write ``manifest.json`` into ``run_dir``; returns the document."""
    doc = {
        "run_dir": str(run_dir),
        "code": code_version(repo),
        "command": list(command),
        "testbed": testbed,
        "hosts": hosts,
        "traces": traces,
        "start": {"unix_s": start_unix_s, "utc": iso_utc(start_unix_s)},
        "end": {"unix_s": end_unix_s, "utc": iso_utc(end_unix_s)},
        "exit_status": {"status": status, "reason": reason},
        "platform": {"python": sys.version.split()[0], "kernel": platform.release(), "machine": platform.machine()},
    }
    doc.update(extra)
    write_atomic(Path(run_dir) / MANIFEST_FILE, json.dumps(doc, indent=2, default=str) + "\n")
    return doc
