"""The one way a figure is saved (rog/analysis/figure_files.save_figure): the names, the formats, one dpi."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from rog.analysis import figure_files as F  # noqa: E402


def test_save_figure_writes_one_file_per_format_asked_or_set_and_closes_the_figure(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "_formats", list(F.FORMATS))  # the process-wide choice, restored after the test
    dpis = []
    fig = plt.figure(figsize=(1, 1))
    monkeypatch.setattr(fig, "savefig", lambda p, dpi, bbox_inches: (dpis.append(dpi), open(p, "w").close()))
    assert [p.name for p in F.save_figure(fig, tmp_path / "a", "x")] == ["x.pdf", "x.png"]  # the default formats
    assert not plt.fignum_exists(fig.number)
    F.set_formats(["svg"])
    assert [p.name for p in F.save_figure(fig, tmp_path / "a", "y")] == ["y.svg"]
    assert [p.name for p in F.save_figure(fig, tmp_path / "a", "z", F.MODULE_FORMATS)] == ["z.png"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.pdf", "x.png", "y.svg", "z.png"]
    assert dpis == [F.DPI] * 4  # one dpi for every file


def test_set_formats_refuses_an_unknown_or_empty_choice(monkeypatch):
    monkeypatch.setattr(F, "_formats", list(F.FORMATS))
    with pytest.raises(ValueError, match="jpg"):
        F.set_formats(["png", "jpg"])
    with pytest.raises(ValueError, match="non-empty"):
        F.set_formats([])
    assert F.formats() == F.FORMATS
