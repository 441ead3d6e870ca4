"""Multi-replica figures: which runs the single-replica figures show, the per-system spread by hand,
and the two replica figures written from synthetic run folders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import matplotlib  # noqa: F401  (the analysis extra: a broken install fails, it does not skip)

from rog.analysis.figures import draw_all  # noqa: E402
from rog.analysis.replica_figures import _spread, main_replica_ids, replica_groups  # noqa: E402

_spec = importlib.util.spec_from_file_location("_analysis_helpers", Path(__file__).with_name("test_analysis.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
make_run = _helpers.make_run


def test_groups_and_main_ids_by_hand():
    items = {"outdoors:a:seed0": ["B0", "R0"], "outdoors:a:seed1": ["B1", "R1"], "outdoors:b:seed0": ["B2", "R2"],
             "batch": ["X"]}
    assert replica_groups(items) == {"outdoors": ["outdoors:a:seed0", "outdoors:a:seed1", "outdoors:b:seed0"]}
    assert main_replica_ids(items) == {"B0", "R0", "X"}
    assert main_replica_ids({"outdoors": ["B", "R"], "batch": ["X"]}) is None
    assert main_replica_ids({"outdoors:a:seed0": ["B"]}) is None  # one replica: nothing to spread


def _three_replicas(res: Path) -> dict:
    """BSP and ROG-4 over three replicas; BSP: compute 1, push 1, stall s, pull 1 -> iteration 3 + s with
    s = 1, 2, 4 over the replicas.  Returns the items (replica -> run ids)."""
    items = {}
    for k, stall in enumerate((1.0, 2.0, 4.0)):
        b = make_run(res, f"BSP-{k}", system="BSP", threshold=0, workers=((1.0, 1.0, stall, 1.0),) * 2)
        r = make_run(res, f"ROG4-{k}", workers=((1.0, 0.5, 0.1 * (k + 1), 0.5),) * 2)
        items[f"outdoors:t{k}:seed0"] = [b.name, r.name]
    return items


def test_replica_figures_and_spread(tmp_path):
    res = tmp_path / "result"
    items = _three_replicas(res)
    from rog.analysis.load import load_run
    from rog.analysis.summary import item_views

    runs = [load_run(res / n) for ids in items.values() for n in ids]
    _, _, views = item_views(runs, items)
    sp = _spread(views.item_sets, list(items))
    assert sp["BSP"]["n"] == 3
    assert sp["BSP"]["min_iter_s"] == pytest.approx(4.0) and sp["BSP"]["max_iter_s"] == pytest.approx(7.0)
    assert sp["BSP"]["median_iter_s"] == pytest.approx(5.0)
    assert sp["BSP"]["components"]["stall_s"] == pytest.approx(2.0)  # the median of 1, 2, 4
    assert sp["ROG-4"]["components"]["stall_s"] == pytest.approx(0.2)
    paths = draw_all(res, tmp_path / "figure", formats=("png",), items=items)
    names = {p.name for p in paths}
    assert {"accuracy_vs_time_replicas.png", "composition_replicas.png", "composition.png"} <= names


def test_a_component_missing_on_some_replicas_is_a_median_of_the_rest_and_named(tmp_path):
    """BSP's stall missing on one of three replicas: the median of the other two (1 and 4 -> 2.5), not of
    (0, 1, 4); missing on every replica: the segment is not drawn; the legend names both."""
    import rog.analysis.figure_helpers as H
    from rog.analysis.load import load_run
    from rog.analysis.replica_figures import plot_replica_composition
    from rog.analysis.summary import item_views

    res = tmp_path / "result"
    items = _three_replicas(res)
    _, _, views = item_views([load_run(res / n) for ids in items.values() for n in ids], items)
    for name, ms in views.item_sets.items():
        for m in ms:
            if m.run.run_id == "BSP-1":
                m.stall_s = None
            if m.label == "ROG-4":
                m.comm_s = None
    sp = _spread(views.item_sets, list(items))
    assert sp["BSP"]["components"]["stall_s"] == pytest.approx(2.5) and sp["BSP"]["have"]["stall_s"] == 2
    assert sp["ROG-4"]["components"]["comm_s"] is None
    seen = {}
    plot_replica_composition(views.item_sets, list(items), tmp_path, H.system_style, H.is_reference,
                             lambda fig, d, name: seen.setdefault(name, fig) and [])
    ax = seen["composition_replicas"].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == ("median of replicas with a value; not drawn without one: BSP stall (2 of 3 replicas), "
                          "ROG-4 communication (0 of 3 replicas)")
    # BSP: compute, comm, stall (data wait 0 is not drawn); ROG-4: compute and stall only
    assert len(ax.patches) == 3 + 2
    H.plt.close("all")
