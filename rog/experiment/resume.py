"""Resume (``run_all.sh`` run again): which run folders of a plan are complete with the planned configuration.

A run folder with ``DONE`` counts as a planned run when its ``config.yaml`` is the one that run's
``scripts/run.py`` child would write now: the planned run's arguments (:func:`rog.experiment.items.run_args`)
are parsed by run.py's own parser and resolved by the code every run resolves its flags with
(:func:`planned_config`), the recorded one is brought to the current shape (:func:`~.config_upgrade.upgrade_config`:
an older run keeps the settings it really ran with), and every entry of the two configurations is compared, nested entries by their
dotted path (``compression_options.delta``, ``policy_options.budget_rule``), except the few in
:data:`RUN_TIME_FIELDS`.  So a setting the run id does not show (an item's extra flags, a mechanism's
option, the trace file's content, the code's ``run_semantics``) still tells a run apart, and the plan's
``why`` column names each difference: ``compression_options.delta: found 0.3, planned 0.4``.

A folder that does not count (``INCOMPLETE``, no marker at all, or ``DONE`` with another configuration) is
moved aside as ``<run-id>.incomplete-<n>`` / ``<run-id>.stale-<n>`` (kept, never deleted) and the run starts
again from scratch.  Resuming a run from its last checkpoint would not be honest: the parameter server's
pending buffers and row versions, the other workers' models, the optimizer momentum and the trace position
are not in a checkpoint, so the continued run would not be the experiment it claims to be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence, Union

import yaml

from rog.errors import ConfigError

from .config_upgrade import upgrade_config
from .rundir import CONFIG_FILE, DONE_FILE, INCOMPLETE_FILE

__all__ = ["RUN_TIME_FIELDS", "planned_config", "config_differences", "Decision", "decide", "set_aside"]

# config.yaml entries (dotted paths; a path covers everything under it) resume does not compare, and why:
# each is written at run time or says where or how the run ran, not what it measured.
RUN_TIME_FIELDS: Mapping[str, str] = MappingProxyType({
    "fallback_reason": "the machine's words for why the emulated testbed fell back; 'testbed' (compared) says what ran",
    "item": "the analysis label of the first item of the plan that ran it; a run shared by items serves them all",
    "flags": "the flags as given; what they decide is compared in its resolved entries, and the flags also hold "
             "--item and the spelling of a value (a default or the same value given)",
    "trace.path": "where the trace file lay on the machine that ran it; its content is 'trace.sha256' (compared)",
    "cache_dir": "where pre-trained weights are cached (made absolute by the Fabric launcher)",
    "emulated.prefix": "the run's namespace prefix, new for every run; the settings beside it are compared",
    "emulated.subnet": "the private range the namespaces' addresses are drawn from (where, not what)",
    "emulated.hosts": "the run's namespace names and addresses, made from a prefix new for every run",
    "launcher": "how the processes were started (local, or Fabric when sshd is installed), set by the command",
    "deploy": "the weights the Fabric launcher shipped, written once they are shipped",
    "hosts.file": "where the hosts file lay; what it says (ps, workers, devices, pacing) is compared",
})


def planned_config(argv: Sequence[str]) -> dict:
    """The ``config.yaml`` a ``scripts/run.py`` child given ``argv`` writes (before its run-time entries):
    run.py's parser and :func:`rog.experiment.config.resolve_config`, as the child runs them.  A flag run.py
    refuses raises :class:`~rog.errors.ConfigError` (argparse's own line is on stderr above it)."""
    from .cli import parse_args
    from .config import resolve_config

    try:
        a = parse_args(list(argv))
    except SystemExit:
        raise ConfigError(f"run.py refuses the flags {' '.join(argv)} (the reason is above)") from None
    return resolve_config(a)


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return got == want or math.isclose(got, want, rel_tol=1e-9)
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    return got == want


def _without_run_time(value: Any, path: str) -> Any:
    """``value`` (the entry at ``path``) less its :data:`RUN_TIME_FIELDS`; a mapping left empty is None."""
    if not isinstance(value, Mapping):
        return value
    kept = {k: _without_run_time(v, f"{path}.{k}") for k, v in value.items() if f"{path}.{k}" not in RUN_TIME_FIELDS}
    return kept if kept or not value else None


def _show(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def config_differences(recorded: Mapping, planned: Mapping, prefix: str = "") -> list[str]:
    """``<dotted path>: found X, planned Y`` for every entry where a run's ``recorded`` config.yaml and the
    ``planned`` configuration differ (a key absent on one side reads as None), :data:`RUN_TIME_FIELDS` aside."""
    out = []
    for key in dict.fromkeys([*planned, *recorded]):  # the planned order, then what only the run recorded
        path = f"{prefix}{key}"
        if path in RUN_TIME_FIELDS:
            continue
        got, want = recorded.get(key), planned.get(key)
        if (got is None) != (want is None):  # an entry on one side only: what it holds beside its run-time parts
            got, want = _without_run_time(got, path), _without_run_time(want, path)
        if isinstance(got, Mapping) and isinstance(want, Mapping):
            out += config_differences(got, want, path + ".")
        elif not _same(got, want):
            out.append(f"{path}: found {_show(got)}, planned {_show(want)}")
    return out


@dataclass(frozen=True)
class Decision:
    """What to do with one planned run: ``skip`` (complete, same config), ``run`` (nothing there),
    ``rerun`` (a folder exists but is incomplete or another config: set aside first); ``why`` says it."""

    action: str
    why: str
    aside_as: str | None = None  # the suffix kind for the folder set aside: incomplete or stale


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when built with it: the same documents, faster
Planned = Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]]


def decide(run_dir: Path, planned: Planned) -> Decision:
    """Skip, run or rerun (see the module docstring); ``planned``: the planned configuration, or a function
    that gives it (called only for a complete run, so a plan of runs not started yet resolves nothing)."""
    if not run_dir.exists():
        return Decision("run", "not started yet")
    if (run_dir / DONE_FILE).exists():
        try:
            cfg = yaml.load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
        except (OSError, yaml.YAMLError) as e:
            return Decision("rerun", f"DONE but config.yaml unreadable ({type(e).__name__})", "stale")
        if not isinstance(cfg, dict):
            return Decision("rerun", "DONE but config.yaml is not a mapping", "stale")
        diff = config_differences(upgrade_config(cfg), planned() if callable(planned) else planned)
        if diff:
            return Decision("rerun", "complete but with another config (" + "; ".join(diff) + ")", "stale")
        return Decision("skip", "complete (DONE) with the same config")
    if (run_dir / INCOMPLETE_FILE).exists():
        reason = (run_dir / INCOMPLETE_FILE).read_text(errors="replace").strip().splitlines()
        return Decision("rerun", f"INCOMPLETE ({reason[0] if reason else 'no reason'})", "incomplete")
    return Decision("rerun", "folder without DONE or INCOMPLETE (killed hard?)", "incomplete")


def set_aside(run_dir: Path, kind: str) -> Path:
    """Rename ``run_dir`` to ``<run-id>.<kind>-<n>`` with the first free ``n`` (nothing is deleted)."""
    n = 1
    while True:
        dest = run_dir.with_name(f"{run_dir.name}.{kind}-{n}")
        if not dest.exists():
            run_dir.rename(dest)
            return dest
        n += 1
