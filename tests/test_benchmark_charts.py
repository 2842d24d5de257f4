"""The benchmark pictures: every reference line (cap, target, the 1.0 ratio) says what it is."""

import json
from pathlib import Path

import pytest

from tools.benchmark import charts

RESULTS = Path(__file__).resolve().parents[1] / "tools" / "benchmark" / "results"


def reference_lines_and_legend(fig):
    """(label of each horizontal reference line, texts of each legend) over the figure."""
    lines, legends = [], []
    for ax in fig.axes:
        for line in ax.get_lines():
            ys = set(line.get_ydata())
            if len(ys) == 1 and list(line.get_xdata()) == [0, 1]:  # an axhline
                lines.append((ax, line.get_label()))
        legend = ax.get_legend()
        legends.append((ax, [t.get_text() for t in legend.get_texts()] if legend else []))
    return lines, dict(legends)


@pytest.mark.parametrize(
    "draw, key", [(charts.peak_figure, "peaks"), (charts.timeline_figure, "timeline")]
)
def test_every_reference_line_is_labelled_in_its_legend(draw, key):
    report = json.loads((RESULTS / "nvidia-h200.json").read_text())
    fig = draw(report[key], "test")
    lines, legends = reference_lines_and_legend(fig)
    assert lines, "the chart has reference lines"
    for ax, label in lines:
        assert not label.startswith("_"), f"unlabelled reference line ({label})"
        assert label in legends[ax]


def test_the_timeline_names_its_cap_and_target_with_their_sizes():
    report = json.loads((RESULTS / "nvidia-h200.json").read_text())
    fig = charts.timeline_figure(report["timeline"], "test")
    labels = {label for _, label in reference_lines_and_legend(fig)[0]}
    new = report["timeline"]["new_mib"]
    assert {
        f"target: {new:g} MiB, the new buffer alone",
        "cap: 128 MiB, the test's budget",
    } <= labels
