"""The docs' plots as a reader sees them: the efficiency plot's title inside the figure, every
line of the Table-7 curves in its legend, the caption curve's x axis where its data is."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from platonic.core.report import caption_plot, curves_plot


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions draw, kept open (they close them after saving)."""
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    monkeypatch.undo()
    plt.close("all")


def curve_cells(rows: list[str]) -> tuple[dict, dict]:
    samples = [0, 500, 1000, 2000, 4000]
    records = [
        {
            "kind": "grid",
            "row": row,
            "column": col,
            "chance": 0.01,
            "curve": {"points": [{"samples": n, "mutual_knn": base + 1e-5 * n + 0.001 * seed} for n in samples]},
        }
        for row in rows
        for col, base in (("good", 0.05), ("ntp", 0.04))
        for seed in range(2)
    ]
    cells = {
        "rows": {r: f"row {r}" for r in rows},
        "records": records,
        "column_views": {"good": "good", "ntp": "documents"},
        "seeds": [0, 1],
        "k": 10,
    }
    return cells, {"model": "good", "reference": "ntp"}


@pytest.mark.parametrize("rows", [["two recaptions"], ["a", "b", "c"]])
def test_curves_title_fits_and_every_line_is_in_the_legend(rows, figures, tmp_path):
    curves_plot(*curve_cells(rows), tmp_path / "curves.png")
    (fig,) = figures
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width, (title, fig.bbox)  # not clipped
    ax = fig.axes[-1]
    labelled = {line.get_linestyle() for line in ax.get_legend().get_lines()}
    drawn = {line.get_linestyle() for line in ax.get_lines() if len(line.get_xdata()) > 1}
    assert drawn <= labelled, (drawn, labelled)  # the dashed reference line too


def test_caption_curve_x_axis_starts_at_its_data(figures, tmp_path):
    ci = {"mean": 20.0, "ci": [18.0, 22.0]}
    rows = {f"{kind}@{n}": {"CIDEr-D": ci} for kind in ("lstsq", "procrustes") for n in (10, 100, 1000, "all")}
    rows |= {"pairfree": {"CIDEr-D": ci}, "ceiling": {"CIDEr-D": ci}}
    summary = {"encoders": {"good": rows}, "seeds": [0, 1, 2], "confidence": 0.95, "once": {}}
    caption_plot(summary, tmp_path / "curve.png")
    (fig,) = figures
    ax = fig.axes[0]
    left, right = ax.get_xlim()
    assert 10 / 2 <= left < 10 and right > 10000, (left, right)  # 10 pairs is the first point; "all" at 10,000
    assert min(ax.get_xticks()) >= 10, ax.get_xticks()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "100", "1000", "all"]
