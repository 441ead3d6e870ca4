"""Deployment over SSH: the YAML hosts file (:mod:`.hosts`), the plan of a run (:mod:`.plan`) and its
execution with Fabric (:mod:`.fabric_runner`).

Hosts and plans need only PyYAML (``--dry-run`` works anywhere); the runner needs the ``deploy``
extra (``pip install -e .[deploy]``: Fabric).  Names are imported lazily.
"""

import importlib

_EXPORTS = {
    "HostsFileError": "hosts", "Host": "hosts", "HostsFile": "hosts", "ReplaySettings": "hosts",
    "load_hosts": "hosts", "hosts_from_dict": "hosts",
    "CodeBundle": "plan", "RunSpec": "plan", "Step": "plan", "Plan": "plan", "build_plan": "plan", "PHASES": "plan",
    "PLACEHOLDERS": "plan",
    "DeployError": "fabric_runner", "FabricRunner": "fabric_runner", "RunOutcome": "fabric_runner",
    "ProcState": "fabric_runner", "make_connection": "fabric_runner",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rog.deploy.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rog.deploy' has no attribute {name!r}")
