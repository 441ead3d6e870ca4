"""Rerunning a recorded run: ``run.py --config result/<run-id>/config.yaml [FLAG ...]``.

Every run's ``config.yaml`` holds, under ``flags``, the value of every ``run.py`` flag it ran with (long
name -> value, defaults included, so a later change of a default does not change a rerun; a flag left
unset, None, is left out; so are the flags that only say where output goes or how a child process
starts: :data:`NOT_RECORDED`).  ``--config`` turns that entry back into a command
line and puts it before the flags given beside ``--config``, so the recorded flags take the place of
the defaults and every flag given beside them overrides its recorded value (argparse keeps the last).
The resolved configuration is then exactly the recorded one as long as the inputs outside the flags
are the same (the trace file, root and namespaces, the GPU, the code's run semantics):
:func:`differences` names the entries where they are not.

Recording the flags rather than inverting the resolved configuration keeps the rerun exact: several
entries are derived from more than one flag (``compute_s`` from ``--compute-s`` or the profile times
``-b``; ``time_scale`` from ``--time-scale`` or the regime; ``iterations`` from ``--iterations``,
``--epoch`` or the budget; ``trace`` from ``-c`` or ``--trace``), and the value alone does not say which.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from rog.errors import ConfigError
from rog.options import on_off

from .config_upgrade import upgrade_config

FLAGS_KEY = "flags"  # config.yaml's entry of the flags given
# dests that say where the output goes or how a process starts, not what the run measures
NOT_RECORDED = frozenset({"help", "config", "result_dir", "overwrite", "no_progress", "dry_run", "child", "worker_id",
                          "ps_address", "run_dir", "origin", "resume_ps", "json", "no_tensorboard"})
# entries of config.yaml a rerun may change without changing what was measured (differences() skips them)
PER_RUN = frozenset({FLAGS_KEY, "launcher", "cache_dir", "deploy", "emulated"})


def _long_name(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def _recordable(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Long flag name -> action, for every flag a run records."""
    return {_long_name(a): a for a in p._actions if a.option_strings and a.dest not in NOT_RECORDED
            and not hasattr(a, "renamed_to")}  # an old spelling (rog.cli_parser.add_renamed) records as the new one


def flag_values(p: argparse.ArgumentParser, a: argparse.Namespace) -> dict[str, Any]:
    """Every recordable flag's value in ``a`` (as parsed, before any check rewrites it; unset ones left
    out), by long name: what ``config.yaml`` records under ``flags``."""
    values = {name: getattr(a, action.dest, None) for name, action in _recordable(p).items()}
    return {name: v for name, v in values.items() if v is not None}


def _fail(path: str, where: str, problem: str) -> ConfigError:
    return ConfigError(f"--config {path}: {where}: {problem}")


def _argv_of(p: argparse.ArgumentParser, path: str, flags: dict) -> list[str]:
    actions = _recordable(p)
    argv: list[str] = []
    for name, value in flags.items():
        renamed = getattr(p._option_string_actions.get(name), "renamed_to", None)  # recorded before a rename
        name = renamed or name
        action = actions.get(name)
        if action is None and name in p._option_string_actions:
            raise _fail(path, f"{FLAGS_KEY}: {name}", "not a recorded flag (it says where output goes or how a process "
                        "starts); delete the line and give it beside --config")
        if action is None:
            raise _fail(path, f"{FLAGS_KEY}: {name}", "run.py has no such flag; correct its name or delete the line")
        if action.nargs == 0:  # store_true
            if not isinstance(value, bool):
                raise _fail(path, f"{FLAGS_KEY}: {name}", f"{value!r} is not true or false; write true or delete the line")
            argv += [name] if value else []
            continue
        if isinstance(value, bool) and action.type is on_off:  # a bool option's flag (rog.options): on|off
            value = "on" if value else "off"
        if value is None or isinstance(value, (bool, list, dict)):  # a value the parser never produces
            raise _fail(path, f"{FLAGS_KEY}: {name}", f"{value!r} is not a value of {name}; write one or delete the line")
        text = value if isinstance(value, str) else repr(value)
        try:
            parsed = action.type(text) if action.type is not None else text
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            raise _fail(path, f"{FLAGS_KEY}: {name}", f"{value!r} is not a valid value; write one or delete the line") from None
        if action.choices is not None and parsed not in action.choices:
            raise _fail(path, f"{FLAGS_KEY}: {name}", f"{value!r} is not one of {', '.join(map(str, action.choices))}")
        argv.append(f"{name}={text}")  # one token: a value that starts with '-' stays a value
    return argv


def recorded(path: str) -> dict:
    """The whole recorded ``config.yaml`` at ``path``; ConfigError (one line, naming the file) otherwise."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror}); give a run's config.yaml "
                          f"(result/<run-id>/config.yaml)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "the file"
        raise ConfigError(f"--config {path}: {where}: not valid YAML ({getattr(e, 'problem', None) or e}); "
                          f"give a run's config.yaml") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: not a run's config.yaml (a mapping of entries); give result/<run-id>/config.yaml")
    return data


def recorded_argv(p: argparse.ArgumentParser, path: str) -> list[str]:
    """The recorded flags of the ``config.yaml`` at ``path`` as a command line for ``p``; a bad file,
    an unknown flag or a bad value raises a one-line :class:`~rog.errors.ConfigError`."""
    flags = recorded(path).get(FLAGS_KEY)
    if flags is None:
        raise ConfigError(f"--config {path}: no '{FLAGS_KEY}' entry (recorded before run.py kept its flags); rerun "
                          f"with the command line in the run's manifest.json instead")
    if not isinstance(flags, dict) or not all(isinstance(k, str) for k in flags):
        raise _fail(path, FLAGS_KEY, "must map flag names (e.g. --threshold) to values")
    return _argv_of(p, path, flags)


def differences(recorded_cfg: dict, cfg: dict) -> list[str]:
    """The entries of ``cfg`` whose value is not the recorded one (``PER_RUN`` entries aside), e.g.
    ``['trace', 'device']``: what makes a rerun with the same flags not the recorded run."""
    return [k for k, v in cfg.items() if k not in PER_RUN and recorded_cfg.get(k) != v]


def report_differences(path: str, cfg: dict, file) -> None:
    """One line on ``file`` when the rerun's configuration ``cfg`` is not the one recorded at ``path``:
    the flags changed beside ``--config`` and the entries that differ (nothing when it is the same)."""
    rec = upgrade_config(recorded(path))  # an older run's entries in the current shape
    diffs = differences(rec, cfg)
    if not diffs:
        return
    old, new = rec.get(FLAGS_KEY) or {}, cfg.get(FLAGS_KEY) or {}
    changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    print(f"note: --config {path}: this run differs from the recorded one in {', '.join(diffs)}"
          + (f" (flags changed: {'; '.join(changed)})" if changed else " with the same flags (the inputs beside them "
             "changed: trace file, testbed, device or code)"), file=file, flush=True)
