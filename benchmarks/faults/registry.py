"""The fault-scenario registry: which modules hold scenarios, and the context every scenario gets.

A scenario is a callable ``(ScenarioContext) -> dict``; the dict holds at least ``scenario``
(its name), ``passed`` (bool), ``rows_lost`` (int: rows of committed gradient some worker never
received, 0 where not applicable), ``details`` (measured values) and ``error`` (str) when it
failed.  A module that cannot be imported is reported as a failed scenario named
``<module>:import``, never skipped silently.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_PACKAGE = __name__.rpartition(".")[0]
SCENARIO_MODULES: tuple[str, ...] = tuple(f"{_PACKAGE}.{m}" for m in (
    "wire_fuzz", "hostile_peers", "signals", "bad_inputs", "runtime_scenarios"))

# Python packages (import names) every scenario needs, and those only some modules need.
REQUIRED_IMPORTS: tuple[str, ...] = ("numpy", "yaml", "torch")
MODULE_IMPORTS: dict[str, tuple[str, ...]] = {f"{_PACKAGE}.wire_fuzz": ("hypothesis",)}


@dataclass(frozen=True)
class ScenarioContext:
    """What a scenario may use: a fresh folder, its length, a seed, a namespace/tc prefix, the interpreter."""

    work_dir: Path  # a fresh temporary folder for this scenario alone
    quick: bool = False  # the short version (tests, --quick)
    seed: int = 0  # seed of every random choice the scenario makes
    prefix: str = "rgz"  # namespace / tc device prefix the scenario may create (and must remove)
    python: str = field(default_factory=lambda: sys.executable)  # interpreter for child processes


Scenario = Callable[[ScenarioContext], dict]


def result(name: str, passed: bool, details: dict | None = None, *, rows_lost: int = 0,
           error: str | None = None) -> dict:
    """A scenario result in the shared shape (``error`` is required when ``passed`` is False)."""
    out = {"scenario": name, "passed": bool(passed), "rows_lost": int(rows_lost), "details": details or {}}
    if not passed:
        out["error"] = error or "failed (no reason given)"
    elif error:
        out["note"] = error
    return out


def missing_imports(modules) -> list[str]:
    """The import names that ``modules`` (scenario module names) need and this interpreter lacks."""
    wanted = list(REQUIRED_IMPORTS)
    for m in modules:
        wanted += [x for x in MODULE_IMPORTS.get(m, ()) if x not in wanted]
    return [x for x in wanted if importlib.util.find_spec(x) is None]


def shadows_random_prefixes(prefix: str, tag: str = "rg") -> bool:
    """True when a random namespace prefix of another run (``tag`` + hex digits) can start with ``prefix``."""
    if len(prefix) <= len(tag):
        return tag.startswith(prefix)
    return prefix.startswith(tag) and all(c in "0123456789abcdef" for c in prefix[len(tag):])


def _import_failure(module: str, why: str) -> Scenario:
    def missing(ctx: ScenarioContext) -> dict:
        return result(f"{module}:import", False, {"module": module}, error=f"scenario module {module} unavailable: {why}")

    return missing


def load_module(module: str) -> tuple[dict[str, Scenario], str | None]:
    """``(scenarios, None)`` for an importable module with a SCENARIOS dict, else ``({}, reason)``."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return {}, "module does not exist (not built yet)"
        return {}, f"import failed: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any import failure is reported as a failed scenario
        last = traceback.format_exc(limit=-1).strip().splitlines()[-1]
        return {}, f"import failed: {type(e).__name__}: {e} ({last})"
    found = getattr(mod, "SCENARIOS", None)
    if not isinstance(found, dict) or not all(isinstance(k, str) and callable(v) for k, v in found.items()):
        return {}, "has no SCENARIOS dict of name -> callable"
    return dict(found), None


def scenarios(modules: tuple[str, ...] = SCENARIO_MODULES) -> dict[str, Scenario]:
    """Every scenario of every module, merged; a module that fails to load adds a failing ``<module>:import``."""
    out: dict[str, Scenario] = {}
    for module in modules:
        found, why = load_module(module)
        if why is not None:
            out[f"{module}:import"] = _import_failure(module, why)
            continue
        for name, fn in found.items():
            if name in out:
                raise ValueError(f"scenario name {name!r} of {module} is already used by another module")
            out[name] = fn
    return out
