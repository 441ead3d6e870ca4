"""The import direction of rog/'s layers (docs/architecture.md), checked by parsing every module's
imports (``import`` and ``from`` statements anywhere in a file, also inside functions; relative
imports resolved), without importing anything.

Layers, by the first name under ``rog``:

* ``engine``: every top-level module (rows, chunks, wire, mta, importance, staleness,
  local_update, links, sim, traces, checkpoint, ...) and the packages ``codecs``, ``policies``, ``models``,
  ``workloads``, ``streams``, ``device`` (:data:`ENGINE_PACKAGES`);
* ``transport``; ``runtime`` (``runtime``, ``power``, ``baselines``, and ``optim``, the application's
  entry into the runtime);
* ``testbed`` and ``deploy`` (one level: the emulated testbed reuses the deployment's hosts model);
* ``analysis``; ``inference``;
* ``papers``: one package per reproduced paper (``rog/papers/<paper>/``: its items, summary sections,
  verdict rules, reference numbers and figures), over every layer below, the experiment's shared
  framework included; ``experiment`` and ``analysis`` reach a paper only through registries of module
  paths (``rog.experiment.items.PAPER_ITEMS`` and ``MODULE_ITEMS``, ``rog.analysis.paper_sections``),
  never by an import;
* ``experiment``: the run framework, may import every layer but ``papers``; except ``rog.experiment.rundir`` (the run-folder
  contract every layer reads) and ``rog.experiment.run_config`` (the typed ``config.yaml`` it reads and
  writes), which count as engine, and ``rog.experiment.emulated`` (a run's emulated
  network, reused by the inference mode), which counts as testbed (:data:`MODULE_LAYER`).

A layer imports only the layers :data:`ALLOWED` lists; third-party packages of :data:`ONLY_IN` only
from the layers named there; nothing in rog/ imports ``scripts``, ``tests``, ``benchmarks`` or test
tools, or loads a file by path (``spec_from_file_location``, ``runpy``).

Structure: every package under rog/ is named in the layer map (:data:`LAYER_OF` or
:data:`ENGINE_PACKAGES`) and in docs/architecture.md's layer table, in the row of its layer; no module
under rog/ passes :data:`MAX_MODULE_LINES` lines; only ``rog/paths.py`` finds the repository from
``__file__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYER_OF = {"transport": "transport", "runtime": "runtime", "power": "runtime", "baselines": "runtime",
            "optim": "runtime", "optim_state": "runtime", "optim_local": "runtime",
            "serving": "runtime", "schedules": "runtime",
            "testbed": "testbed", "deploy": "deploy", "analysis": "analysis",
            "inference": "inference", "experiment": "experiment", "papers": "papers"}  # any other name under rog: engine
ENGINE_PACKAGES = {"codecs", "policies", "models", "workloads", "streams", "device"}  # the engine's packages, each named on purpose
MAX_MODULE_LINES = 700  # a module that grows past this is split by concern
# Modules whose layer is not their package's: the run-folder contract (file names and atomic helpers)
# is read by the analysis and the DDP baseline too, so it sits at the bottom and imports only the engine;
# so does the typed run configuration it reads and writes (rog.experiment.run_config).
# The emulated network of a run (namespaces, tc replay, loopback shaping) imports only the testbed and
# below, and the inference mode's live session reuses it: it counts as testbed.
MODULE_LAYER = {"rog.experiment.rundir": "engine", "rog.experiment.run_config": "engine",
                "rog.experiment.config_upgrade": "engine",
                "rog.experiment.emulated": "testbed"}
CORE = {"engine", "transport", "runtime"}
ALLOWED = {
    "engine": {"engine"},
    "transport": {"engine", "transport"},
    "runtime": CORE,
    "testbed": CORE | {"testbed", "deploy"},
    "deploy": CORE | {"testbed", "deploy"},
    "analysis": CORE | {"analysis", "inference"},
    "inference": CORE | {"testbed", "inference"},
    "experiment": CORE | {"testbed", "deploy", "analysis", "inference", "experiment"},
    "papers": CORE | {"testbed", "deploy", "analysis", "inference", "experiment", "papers"},
}
ONLY_IN = {  # third-party package -> the layers that may import it
    "fabric": {"deploy", "experiment"}, "paramiko": {"deploy", "experiment"}, "invoke": {"deploy", "experiment"},
    "matplotlib": {"analysis", "experiment", "papers"}, "pandas": {"analysis", "experiment", "papers"},
}
NEVER = {"scripts", "tests", "benchmarks", "pytest", "hypothesis"}  # not from anywhere in rog/
LOAD_BY_PATH = {"spec_from_file_location", "run_path"}
# The package's one-call entry for applications, ``rog.serve`` (issue 51): rog/__init__.py imports it on first
# attribute access (PEP 562), never when ``rog`` is imported, so the engine stays free of the runtime.
LAZY_EXPORTS = {("rog", "rog.serving")}


def layer(module: str) -> str:
    """The layer of a module name under ``rog`` (``rog.runtime.server`` -> ``runtime``)."""
    for name, fixed in MODULE_LAYER.items():
        if module == name or module.startswith(name + "."):
            return fixed
    parts = module.split(".")
    return LAYER_OF.get(parts[1], "engine") if len(parts) > 1 else "engine"


def imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path`` (module name ``module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "rog" or not node.module:  # ``from rog import x`` / ``from . import x``: x may be a module
                out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
        elif isinstance(node, ast.Attribute) and node.attr in LOAD_BY_PATH:
            out.append((node.lineno, f"<loads a file by path: {node.attr}>"))
        elif isinstance(node, ast.Name) and node.id in LOAD_BY_PATH:
            out.append((node.lineno, f"<loads a file by path: {node.id}>"))
    return out


def violations(root: Path) -> list[str]:
    """Every import under ``root/rog`` that breaks a rule, as ``file:line: what``."""
    found = []
    for path in sorted((root / "rog").rglob("*.py")):
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
        module = module[: -len(".__init__")] if module.endswith(".__init__") else module
        src = layer(module)
        for line, target in imports(path, module):
            top = target.split(".")[0]
            where = f"{rel}:{line}"
            if target.startswith("<loads"):
                found.append(f"{where}: {target[1:-1]} (import a module instead)")
            elif top == "rog" and (module, target) not in LAZY_EXPORTS:
                dst = layer(target)
                if dst not in ALLOWED[src]:
                    found.append(f"{where}: {src} imports {target} ({dst})")
            elif top in NEVER:
                found.append(f"{where}: imports {target} (nothing in rog/ may)")
            elif top in ONLY_IN and src not in ONLY_IN[top]:
                found.append(f"{where}: {src} imports {top} (only {', '.join(sorted(ONLY_IN[top]))} may)")
    return found


def packages(root: Path) -> list[str]:
    """The packages directly under ``root/rog`` (folders with an ``__init__.py``)."""
    return sorted(p.name for p in (root / "rog").iterdir() if (p / "__init__.py").is_file())


def doc_layer_table(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's layer table: each backquoted name of the packages column -> the layers of its row."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] in ("layer", "---") or set(cells[0]) <= {"-"}:
            continue
        layers = {x.strip() for x in cells[0].split(",")}
        if not layers <= set(ALLOWED):
            continue
        for name in re.findall(r"`([a-z_]+)`", cells[1]):
            out.setdefault(name, set()).update(layers)
    return out


def structure_problems(root: Path) -> list[str]:
    """Packages missing from the layer map or from docs/architecture.md's table, oversized modules, and
    modules other than rog/paths.py that find the repository from ``__file__``."""
    found = []
    table = doc_layer_table((root / "docs" / "architecture.md").read_text(encoding="utf-8"))
    for name in packages(root):
        if name not in LAYER_OF and name not in ENGINE_PACKAGES:
            found.append(f"rog/{name}: missing from the layer map (LAYER_OF or ENGINE_PACKAGES in tests/test_layers.py)")
            continue
        want = layer(f"rog.{name}")
        if want not in table.get(name, set()):
            found.append(f"rog/{name}: missing from docs/architecture.md's layer table (row '{want}')")
    for path in sorted((root / "rog").rglob("*.py")):
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            found.append(f"{rel}: {n} lines (at most {MAX_MODULE_LINES}: split it by concern)")
        if rel.as_posix() != "rog/paths.py" and re.search(r"__file__\)?\.resolve\(\)\.parents|__file__\)\.parents", text):
            found.append(f"{rel}: finds the repository from __file__ (use rog.paths.repo_root())")
    return found


def test_rog_follows_the_layer_rules():
    bad = violations(ROOT)
    assert not bad, "imports against docs/architecture.md's layer rules:\n" + "\n".join(bad)


def test_every_layer_is_named_in_the_rules():
    assert set(ALLOWED) == set(LAYER_OF.values()) | {"engine"}
    assert all(ALLOWED[src] <= set(ALLOWED) for src in ALLOWED)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_the_checker_catches_each_kind_of_forbidden_import(tmp_path):
    root = _tree(tmp_path, {
        "rog/__init__.py": "",
        "rog/rows.py": "import numpy as np\n",
        "rog/chunks.py": "from .rows import x\n",  # engine -> engine: fine
        "rog/runtime/__init__.py": "",
        "rog/runtime/server.py": "def f():\n    from ..experiment import items\n",  # runtime -> experiment (lazy)
        "rog/runtime/worker.py": "from rog.transport import connect\nimport matplotlib.pyplot as plt\n",
        "rog/transport/__init__.py": "from ..runtime import server\n",  # transport -> runtime
        "rog/testbed/__init__.py": "from rog.deploy import hosts\nfrom rog import analysis\n",  # deploy fine, analysis not
        "rog/analysis/figures.py": "import matplotlib\nimport scripts.run\n",
        "rog/deploy/runner.py": "import fabric\nimport importlib.util as u\nu.spec_from_file_location('x', 'scripts/run.py')\n",
        "rog/experiment/cli.py": "import fabric, matplotlib\nfrom rog.analysis import figures\n",  # the top: fine
        "rog/experiment/rundir.py": "from rog.analysis import load\n",  # the contract counts as engine
        "rog/analysis/load.py": "from rog.experiment.rundir import DONE_FILE\n",  # fine: reads the contract
        "rog/policies/x.py": "from rog.testbed import netns\n",  # engine -> testbed
        "rog/papers/adsp/item.py": "from rog.experiment.items import Item\nimport matplotlib\nfrom ..dynacomm import bench\n",  # fine
        "rog/experiment/items.py": "from rog.papers.adsp import item\n",  # experiment -> papers: through a registry only
        "rog/analysis/summary.py": "def f():\n    from ..papers.adsp.summary import adsp_summary\n",  # analysis -> papers
    })
    got = violations(root)
    assert got == [
        "rog/analysis/figures.py:2: imports scripts.run (nothing in rog/ may)",
        "rog/analysis/summary.py:2: analysis imports rog.papers.adsp.summary (papers)",
        "rog/deploy/runner.py:3: loads a file by path: spec_from_file_location (import a module instead)",
        "rog/experiment/items.py:1: experiment imports rog.papers.adsp (papers)",
        "rog/experiment/rundir.py:1: engine imports rog.analysis (analysis)",
        "rog/policies/x.py:1: engine imports rog.testbed (testbed)",
        "rog/runtime/server.py:2: runtime imports rog.experiment (experiment)",
        "rog/runtime/worker.py:2: runtime imports matplotlib (only analysis, experiment, papers may)",
        "rog/testbed/__init__.py:2: testbed imports rog.analysis (analysis)",
        "rog/transport/__init__.py:1: transport imports rog.runtime (runtime)",
    ]


def test_one_forbidden_import_added_to_a_copy_of_rog_fails_the_check(tmp_path):
    """The real tree passes; the same tree with one line added to the runtime does not."""
    import shutil

    shutil.copytree(ROOT / "rog", tmp_path / "rog", ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(tmp_path) == []
    server = tmp_path / "rog" / "runtime" / "server.py"
    n = len(server.read_text().splitlines())
    server.write_text(server.read_text() + "\nfrom rog.analysis.figures import plot_all  # noqa\n")
    assert violations(tmp_path) == [f"rog/runtime/server.py:{n + 2}: runtime imports rog.analysis.figures (analysis)"]


def test_every_package_is_mapped_and_documented_and_no_module_is_too_long():
    bad = structure_problems(ROOT)
    assert not bad, "\n".join(bad)


def test_the_structure_check_finds_an_unmapped_package_a_doc_gap_a_long_module_and_a_parents_lookup(tmp_path):
    doc = ("| layer | packages and modules | may import |\n|---|---|---|\n"
           "| engine | every top-level module; `policies`, `streams` | engine |\n"
           "| runtime | `runtime` | engine, runtime |\n")
    root = _tree(tmp_path, {
        "docs/architecture.md": doc,
        "rog/__init__.py": "",
        "rog/paths.py": "from pathlib import Path\nROOT = Path(__file__).resolve().parents[1]\n",  # the one allowed
        "rog/policies/__init__.py": "x = 1\n" * 700,  # exactly at the limit: fine
        "rog/streams/__init__.py": "",
        "rog/runtime/__init__.py": "",
        "rog/runtime/big.py": "x = 1\n" * 701,
        "rog/models/__init__.py": "",  # mapped (engine) but not in the doc's table
        "rog/newpkg/__init__.py": "",  # in neither
        "rog/transport/__init__.py": "from pathlib import Path\nR = Path(__file__).resolve().parents[2]\n",
    })
    assert structure_problems(root) == [
        "rog/models: missing from docs/architecture.md's layer table (row 'engine')",
        "rog/newpkg: missing from the layer map (LAYER_OF or ENGINE_PACKAGES in tests/test_layers.py)",
        "rog/transport: missing from docs/architecture.md's layer table (row 'transport')",
        "rog/runtime/big.py: 701 lines (at most 700: split it by concern)",
        "rog/transport/__init__.py: finds the repository from __file__ (use rog.paths.repo_root())",
    ]


def test_the_simulator_stays_out_of_a_robot_install():
    """simpy is imported by the simulator's modules only (rog/sim.py, rog/sim_links.py), nothing in rog/ imports
    them but each other and the simulate command (rog/experiment/simulate*.py, which no robot process runs), and
    pyproject.toml lists simpy in the ``sim`` and ``test`` extras, not in the dependencies a robot installs."""
    sim_modules = {"rog.sim", "rog.sim_links"}
    allowed_users = sim_modules | {"rog.experiment.simulate", "rog.experiment.simulate_study"}
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib

    users = []
    for path in sorted((ROOT / "rog").rglob("*.py")):
        rel = path.relative_to(ROOT)
        module = ".".join(rel.with_suffix("").parts)
        module = module[: -len(".__init__")] if module.endswith(".__init__") else module
        for line, target in imports(path, module):
            if (target.split(".")[0] == "simpy" and module not in sim_modules) or (
                    target in sim_modules and module not in allowed_users):
                users.append(f"{rel}:{line}: imports {target}")
    assert not users, "\n".join(users)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda dep: re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower()  # noqa: E731
    assert "simpy" not in {name(d) for d in project["dependencies"]}
    for extra in ("sim", "test"):
        assert "simpy" in {name(d) for d in project["optional-dependencies"][extra]}, extra


def test_the_parameter_server_owns_its_parts_and_mixes_in_nothing():
    """Issue 54: the parameter server is split by state, one object per part with its own state, not mixins over one
    ``self``; no part's state is left on the server."""
    import numpy as np

    from rog.codecs.compression import RawCodec
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime.server import ParameterServer

    assert ParameterServer.__mro__ == (ParameterServer, object)
    ps = ParameterServer(RowPartition.from_shapes([("w", (2, 3))]), 2, make_policy("BSP"), RawCodec())
    parts = {"state": "RowState", "membership": "Membership", "team": "TeamModel", "admission": "Admission",
             "exchange": "Exchange", "checkpoints": "Checkpoints"}
    assert {k: type(getattr(ps, k)).__name__ for k in parts} == parts
    own = set(vars(ps))
    for k in parts:  # each part's state lives in the part only
        assert not (set(vars(getattr(ps, k))) - {"ps", "policy", "cond", "view", "wait", "wait_timeout_s",
                                                   "partition", "evict_after_s"}) & own, k
    assert np.array_equal(ps.state.active, [True, True]) and ps.membership.joined == set()
