"""The live executor's configuration: the JSON the launcher writes for each process
(``config-server.json``, ``config-robot.json``: :meth:`rog.inference.runner.LiveSession._config`), typed.

:meth:`LiveConfig.from_dict` reads the entries by name and refuses a missing or mistyped one with a
:class:`~rog.errors.ConfigError` naming the file and the field; entries it does not know are left
alone (the cost-model bound reads the files of older runs too).  :meth:`LiveConfig.for_role` checks
what one process needs on top (the server its port; the robot the server's address, the port and the
records file).  The file's format is unchanged: the launcher still writes the plain dict.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from rog.config_entries import entry, require_mapping
from rog.errors import ConfigError

__all__ = ["LiveConfig"]

ROLE_NEEDS = {"server": ("port",), "robot": ("port", "server", "records")}


@dataclass(frozen=True)
class LiveConfig:
    """One live process's configuration: ``model`` and ``seed`` (the network and the input image),
    ``times`` (:class:`rog.inference.costmodel.DeviceTimes` as a dict), the server's ``server`` address and
    ``port``, ``tables`` (planner -> its table rows as dicts), the ``trace`` file and its ``replay`` options
    (the oracle rate; None: no trace), ``fixed_mbit`` (a constant oracle rate instead), ``estimate`` (the
    bandwidth estimate's mode), ``records`` (the robot's JSON-lines file), ``tcp_cc`` (a TCP congestion
    control; None: the system's), ``period_s`` (seconds between frames on a trace; 0: back to back)."""

    model: str
    times: dict
    seed: int = 0
    port: Optional[int] = None
    server: Optional[str] = None
    records: Optional[str] = None
    tables: dict = field(default_factory=dict)
    trace: Optional[str] = None
    replay: dict = field(default_factory=dict)
    fixed_mbit: Optional[float] = None
    estimate: str = "passive"
    tcp_cc: Optional[str] = None
    period_s: float = 0.0

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "live configuration") -> LiveConfig:
        """The configuration in ``d``; :class:`~rog.errors.ConfigError` naming ``source`` and the field for a
        missing ``model`` or ``times`` or an entry of the wrong type."""
        require_mapping(d, source)
        for key in ("model", "times"):
            if key not in d:
                raise ConfigError(f"{source}: {key}: missing (the launcher, rog.inference.runner, writes it)")
        kinds = {"model": str, "times": dict, "seed": int, "port": int, "server": str, "records": str,
                 "tables": dict, "trace": str, "replay": dict, "fixed_mbit": float, "estimate": str, "tcp_cc": str,
                 "period_s": float}
        kw = {key: copy.deepcopy(v) for key, v in ((k, entry(d, k, kind, source)) for k, kind in kinds.items())
              if v is not None}  # absent or null: the field's default
        for name, rows in kw.get("tables", {}).items():
            if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
                raise ConfigError(f"{source}: tables.{name}: expected a list of table rows, got {rows!r}")
        for key in ("times", "tables", "replay"):
            if key in kw:
                kw[key] = dict(kw[key])
        return cls(**kw)

    def for_role(self, role: str, source: str = "live configuration") -> LiveConfig:
        """This configuration, checked for what ``role`` (``server`` or ``robot``) needs on top."""
        missing = [k for k in ROLE_NEEDS[role] if getattr(self, k) is None]
        if missing:
            raise ConfigError(f"{source}: {missing[0]}: missing (the {role} needs it)")
        return self
