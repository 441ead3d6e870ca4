"""Figures from synthetic run folders: every figure is written (PDF + PNG), sane sizes, nothing in result/."""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import matplotlib  # noqa: F401  (the analysis extra: a broken install fails, it does not skip)

from rog.analysis import load_run  # noqa: E402
from rog.analysis.figure_helpers import PALETTE, system_style  # noqa: E402
from rog.analysis.figures import draw_all  # noqa: E402
from rog.analysis.load import find_runs  # noqa: E402
from rog.analysis.metrics import compute_metrics  # noqa: E402
from rog.papers.rog.figures_studies import plot_micro_events  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_analysis_helpers", Path(__file__).with_name("test_analysis.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
make_run = _helpers.make_run

FIGURES = ("composition", "accuracy_vs_iterations", "accuracy_vs_time", "energy_vs_accuracy", "micro_events", "sensitivity")


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _results(root: Path) -> Path:
    res = root / "result"
    slow = (1.0, 1.0, 3.0, 1.0)
    rep = [(4.0 * k, 50.0 if k % 2 else 10.0) for k in range(12)]
    for mode in ("artifact", "recorded"):
        make_run(res, f"BSP-{mode}", system="BSP", threshold=0, replay_mode=mode, workers=(slow, slow),
                 evals=((0, 0.5), (5, 0.58), (10, 0.62)))
        make_run(res, f"SSP4-{mode}", system="SSP", replay_mode=mode, workers=((1.0, 1.0, 2.0, 1.0),) * 2)
        make_run(res, f"ROG4-{mode}", system="ROG", replay_mode=mode, share=0.4, replay=rep)
        make_run(res, f"ROG20-{mode}", system="ROG", threshold=20, replay_mode=mode, workers=((1.0, 0.5, 0.2, 0.5),) * 2)
    # sensitivity: batch x2, 3 workers, thresholds 30 / 40
    make_run(res, "BSP-x2", system="BSP", threshold=0, batch_multiple=2, workers=(slow, slow))
    make_run(res, "ROG4-x2", system="ROG", batch_multiple=2)
    make_run(res, "BSP-w3", system="BSP", threshold=0, workers=(slow,) * 3)
    make_run(res, "ROG4-w3", system="ROG", workers=(W := (1.0, 0.5, 1.0, 0.5), W, W))
    make_run(res, "ROG30", system="ROG", threshold=30, workers=((1.0, 0.5, 0.1, 0.5),) * 2)
    return res


def test_draw_all_writes_every_figure_and_only_into_figure_dir(tmp_path):
    res = _results(tmp_path)
    before = sorted(p for p in res.rglob("*"))
    fig_dir = tmp_path / "figure"
    paths = draw_all(res, fig_dir)
    assert sorted(p for p in res.rglob("*")) == before  # nothing written into result/
    names = {p.name for p in paths}
    for name in FIGURES:
        for ext in ("pdf", "png"):
            p = fig_dir / f"{name}.{ext}"
            assert p.name in names and p.stat().st_size > 1000, p
        w, h = png_size(fig_dir / f"{name}.png")
        assert 400 <= w <= 4000 and 300 <= h <= 4000, (name, w, h)
    # two replay modes -> two panels side by side: wider than one panel
    w2, _ = png_size(fig_dir / "accuracy_vs_time.png")
    w1, _ = png_size(fig_dir / "micro_events.png")
    assert w2 > w1


def test_sensitivity_is_skipped_without_its_runs(tmp_path):
    res = tmp_path / "result"
    make_run(res, "BSP-a", system="BSP", threshold=0)
    make_run(res, "ROG4-a", system="ROG")
    paths = draw_all(res, tmp_path / "figure", formats=("png",))
    assert all(p.suffix == ".png" for p in paths)
    names = {p.stem for p in paths}
    assert "sensitivity" not in names
    assert {"composition", "accuracy_vs_time", "micro_events"} <= names


def test_one_colour_per_system():
    runs = []
    for sysname, thr in (("ROG", 4), ("ROG", 20), ("BSP", 0)):
        class R:  # the two fields system_style reads
            system, threshold = sysname, thr
        runs.append(R)
    rog4, rog20, bsp = (system_style(r, runs) for r in runs)
    import matplotlib.colors as mc

    assert mc.to_hex(rog4["color"]) == PALETTE["ROG"] and mc.to_hex(bsp["color"]) == PALETTE["BSP"]
    assert rog4["linestyle"] != rog20["linestyle"]  # thresholds of one system differ by style
    assert len(set(PALETTE.values())) == len(PALETTE)


def test_micro_events_bad_arguments(tmp_path):
    res = tmp_path / "result"
    make_run(res, "ROG4-a", system="ROG")
    metrics, *_ = compute_metrics([load_run(d) for d in find_runs(res)])
    with pytest.raises(ValueError, match="run_id"):
        plot_micro_events(metrics, tmp_path / "f", run_id="nope")
    with pytest.raises(ValueError, match="worker 7"):
        plot_micro_events(metrics, tmp_path / "f", worker=7)
    with pytest.raises(ValueError, match="window_s"):
        plot_micro_events(metrics, tmp_path / "f", window_s=(5.0, 1.0))


def test_plot_cli(tmp_path):
    res = tmp_path / "result"
    make_run(res, "BSP-a", system="BSP", threshold=0)
    make_run(res, "ROG4-a", system="ROG")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot.py"), "--result-dir", str(res),
                          "--figure-dir", str(tmp_path / "fig"), "--formats", "png"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "fig" / "composition.png").stat().st_size > 1000
    assert not (tmp_path / "fig" / "composition.pdf").exists()
    same = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot.py"), "--result-dir", str(res),
                           "--figure-dir", str(res)], capture_output=True, text=True, cwd=ROOT)
    assert same.returncode == 2 and "must differ" in same.stderr


def _target_lines(monkeypatch):
    """Capture, per saved figure, each panel's (title, y of every horizontal line) instead of writing files."""
    import rog.analysis.figure_helpers as H

    seen = {}

    def capture(fig, figure_dir, name, formats=None):
        panels = []
        for ax in fig.axes:
            flat = [float(ln.get_ydata()[0]) for ln in ax.lines
                    if len(set(map(float, ln.get_ydata()))) == 1 and ln.get_linestyle() not in ("-", "None")]
            panels.append((ax.get_title(), flat))
        seen[name] = panels
        H.plt.close(fig)
        return []

    monkeypatch.setattr(H, "save_figure", capture)
    return seen


def test_the_end_to_end_target_is_drawn_only_on_its_own_replay_modes_panel(tmp_path, monkeypatch):
    """With items, the first item's target (its runs are all in artifact mode here) is not the recorded
    item's: the recorded panel of accuracy over time has no target line; without items (one target for
    every run) both panels have it."""
    res = _results(tmp_path)
    items = {"outdoors": ["BSP-artifact", "SSP4-artifact", "ROG4-artifact", "ROG20-artifact"],
             "recorded": ["BSP-recorded", "SSP4-recorded", "ROG4-recorded", "ROG20-recorded"]}
    seen = _target_lines(monkeypatch)
    draw_all(res, tmp_path / "figure", items=items)
    (t_art, l_art), (t_rec, l_rec) = seen["accuracy_vs_time"]
    assert "artifact" in t_art and "recorded" in t_rec
    assert len(l_art) == 1 and l_rec == []
    seen.clear()
    draw_all(res, tmp_path / "figure")
    (_, l_art), (_, l_rec) = seen["accuracy_vs_time"]
    assert len(l_art) == 1 and l_rec == l_art


def test_composition_draws_the_reference_on_its_own_axis(tmp_path, monkeypatch):
    """DDP's 30 s iterations get their own axis (own y scale); the compared systems' axis ends near their tallest bar."""
    import rog.analysis.figure_helpers as H
    import rog.papers.rog.figures as F

    res = tmp_path / "result"
    make_run(res, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 2.0, 1.0),) * 2)  # 5 s per iteration
    make_run(res, "ROG4-a", system="ROG", workers=((1.0, 0.5, 0.5, 0.5),) * 2)  # 2.5 s
    make_run(res, "DDP-a", system="DDP", threshold=0, workers=((1.0, 25.0, 3.0, 1.0),) * 2, iterations=4)  # 30 s
    metrics, *_ = compute_metrics([load_run(d) for d in find_runs(res)])
    seen = {}
    monkeypatch.setattr(H, "save_figure", lambda fig, d, name, formats=None: seen.setdefault(name, fig) and [])
    F.plot_composition(metrics, tmp_path / "fig")
    axes = seen["composition"].axes
    labels = [[t.get_text() for t in ax.get_xticklabels()] for ax in axes]
    assert labels == [["BSP", "ROG-4"], ["DDP"]]
    cmp_top, ref_top = axes[0].get_ylim()[1], axes[1].get_ylim()[1]
    assert cmp_top == pytest.approx(5.0 * 1.35)  # the compared systems' scale: BSP's bar + headroom
    assert ref_top == pytest.approx(30.0 * 1.35)
    assert axes[1].get_shared_y_axes().get_siblings(axes[1]) == [axes[1]]  # not the compared axis's scale


def _captured(monkeypatch) -> dict:
    """Capture every figure at figure_helpers.save_figure (name -> the figure) instead of writing files."""
    import rog.analysis.figure_helpers as H

    seen = {}

    def capture(fig, figure_dir, name, formats=None):
        seen[name] = fig
        return []

    monkeypatch.setattr(H, "save_figure", capture)
    return seen


def test_energy_caption_labels_the_model_and_names_the_testbed(tmp_path, monkeypatch):
    """The energy figure says a modelled energy is not a measurement, whose watts priced it, and on which
    testbed the runs ran (text built here from the profile numbers of Table III and the runs' configs)."""
    import rog.analysis.figure_helpers as H
    import rog.papers.rog.figures as F

    res = tmp_path / "result"
    make_run(res, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2)
    make_run(res, "ROG4-a", system="ROG")
    seen = _captured(monkeypatch)
    metrics, target, *_ = compute_metrics([load_run(d) for d in find_runs(res)])
    F.plot_energy_vs_accuracy(metrics, tmp_path / "fig", target=target)
    texts = [t.get_text() for t in seen["energy_vs_accuracy"].texts]
    caption = next(t for t in texts if t.startswith("Energy modelled"))
    assert len(caption.splitlines()) <= 2  # plain words, two lines at most; summary.md has the watts
    assert " ".join(caption.split()) == ("Energy modelled, not measured: each worker's compute, communication and stall "
                                         "time x the jetson-xavier-nx profile's watts (testbed: loopback; details in "
                                         "summary.md).")
    F.plot_composition(metrics, tmp_path / "fig")
    F.plot_accuracy_vs_time(metrics, tmp_path / "fig")
    for name in ("composition", "accuracy_vs_time"):
        assert seen[name]._suptitle.get_text().endswith("; testbed: loopback)"), name
    H.plt.close("all")


def test_a_missing_bar_segment_is_left_out_and_named(tmp_path, monkeypatch):
    """A component without a value is not drawn as a zero-height bar: one rectangle fewer, and the legend
    names it."""
    import rog.analysis.figure_helpers as H
    import rog.papers.rog.figures as F

    res = tmp_path / "result"
    make_run(res, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2)
    make_run(res, "ROG4-a", system="ROG")
    metrics, *_ = compute_metrics([load_run(d) for d in find_runs(res)])
    seen = _captured(monkeypatch)
    F.plot_composition(metrics, tmp_path / "fig")
    whole = len(seen["composition"].axes[0].patches)
    assert whole == 2 * len(H.COMPONENTS)  # two bars of every component, nothing else on the axis
    by = {m.run.run_id: m for m in metrics}
    by["ROG4-a"].stall_s = None
    F.plot_composition(metrics, tmp_path / "fig")
    ax = seen["composition"].axes[0]
    assert len(ax.patches) == whole - 1
    legend = [t.get_text() for t in seen["composition"].legends[0].get_texts()]  # below the axes (never over a bar)
    assert legend[-1] == "not drawn, no value: ROG-4 stall"
    H.plt.close("all")


def test_the_legend_swatches_have_the_colour_of_the_bars(tmp_path, monkeypatch):
    """One system: the component swatches are shades of its colour, as its bars are (not grey)."""
    import matplotlib.colors as mcolors

    import rog.analysis.figure_helpers as H
    import rog.papers.rog.figures as F

    res = tmp_path / "result"
    make_run(res, "ROG4-a", system="ROG", replay_mode=None)
    metrics, *_ = compute_metrics([load_run(d) for d in find_runs(res)])
    seen = _captured(monkeypatch)
    F.plot_composition(metrics, tmp_path / "fig")
    fig = seen["composition"]
    bars = [mcolors.to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    swatches = [mcolors.to_hex(h.get_facecolor()) for h in fig.legends[0].get_patches()][:len(H.COMPONENTS)]
    assert swatches == bars[:len(H.COMPONENTS)]  # one bar: its segments in the components' order
    assert fig.axes[0].get_title() == ""  # an unshaped run has no replay mode: no "not in the config" subtitle
    H.plt.close("all")


def test_adsp_and_dynacomm_figures_leave_a_missing_part_out(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from rog.papers.dynacomm import summary as D
    from rog.papers.adsp.figures import plot_adsp

    closed = []
    monkeypatch.setattr(plt, "close", lambda fig=None: closed.append(fig))

    def row(system, comm_s):
        return dict(system=system, iter_s=1.0, compute_s=0.5, comm_s=comm_s, stall_s=0.2, waiting_share=None)

    plot_adsp({"fig1": [row("BSP", 0.3), row("ADSP", None)], "ushape": {"rows": [], "searches": []}},
              tmp_path / "fig", ("png",))
    ax = closed[-1].axes[0]
    assert len([p for p in ax.patches if p.get_height() > 0]) == 5  # 3 + 2 parts: ADSP's communication left out
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "not drawn, no value: ADSP communication"
    parts = dict(fwd=1.0, bwd=1.0, iteration=1.0, compute_only_s=0.1, overlap_s=0.2, comm_only_s=0.3, stall_s=0.4)
    rows = {"Sequential": dict(parts), "DynaComm": dict(parts, stall_s=None)}
    monkeypatch.setattr(D, "dynacomm_summary", lambda _: {"models": {"m": dict(rows=rows, workers=2, rate_mbit=10.0)}})
    D.plot_dynacomm(tmp_path, tmp_path / "fig")
    ax2 = closed[-1].axes[1]
    assert len([p for p in ax2.patches if p.get_height() > 0]) == 7  # 4 + 3 segments
    assert [t.get_text() for t in ax2.get_legend().get_texts()][-1] == "not drawn, no value: DynaComm barrier stall"
