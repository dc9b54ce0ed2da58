"""Lines of one legend differ by more than colour (issue 26), in every figure of the book.

The book's style pairs each colour of its cycle with a dash pattern, and checks every figure it
draws (``aiayn.figures.style.watch_legends``): a legend whose lines differ only by colour is
reported on stderr, as an output of the cell that drew it. nbval then fails on that chapter
(the committed outputs have no such report), and the last test here fails if a report was ever
committed by ``make notebooks``.
"""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from aiayn.figures.style import BOOK_LINE_STYLES, LEGEND_WARNING, legend_problems, use_book_style

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def book_style():
    with plt.rc_context():
        use_book_style()
        yield
    plt.close("all")


def test_lines_that_differ_only_by_colour_are_reported(book_style):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color="tab:blue", linestyle="-", label="a")
    ax.plot([0, 1], [1, 0], color="tab:orange", linestyle="-", label="b")
    ax.errorbar([0, 1], [1, 2], yerr=[0.1, 0.1], fmt="o", label="c")
    ax.errorbar([0, 1], [2, 3], yerr=[0.1, 0.1], fmt="o", label="d")
    ax.errorbar([0, 1], [2, 3], yerr=[0.1, 0.1], fmt="s", label="e")  # another marker
    ax.plot([0, 1], [0, 2], linestyle="--", label="f")  # another dash pattern
    ax.bar([0], [1], label="g")
    ax.bar([1], [1], label="h")  # bars are not lines: not compared
    ax.set_title("planted")
    ax.legend()
    assert legend_problems(fig) == [
        "legend 1 ('planted'): 'a' and 'b' differ only by colour",
        "legend 1 ('planted'): 'c' and 'd' differ only by colour",
    ]


def test_a_figure_legend_is_checked_too(book_style):
    fig, (left, right) = plt.subplots(1, 2)
    left.plot([0, 1], [0, 1], "-", label="a")
    right.plot([0, 1], [1, 0], "-", color="tab:red", label="b")
    fig.legend()
    assert legend_problems(fig) == ["legend 1: 'a' and 'b' differ only by colour"]


def test_the_cycle_gives_each_colour_its_own_dashes(book_style):
    fig, ax = plt.subplots()
    for i in range(len(BOOK_LINE_STYLES) + 1):
        ax.plot([0, 1], [i, i + 1], label=f"line {i}")
    ax.legend()
    # ten lines differ by dashes as well as colour; the eleventh repeats the first's style
    assert legend_problems(fig) == ["legend 1: 'line 0' and 'line 10' differ only by colour"]


def test_a_drawn_figure_reports_its_problems_on_stderr(book_style, capsys):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], "-", label="a")
    ax.plot([0, 1], [1, 0], "-", label="b")
    ax.legend()
    fig.canvas.draw()
    fig.canvas.draw()  # reported once per figure
    err = capsys.readouterr().err
    assert err == (f"{LEGEND_WARNING}: legend 1: 'a' and 'b' differ only by colour; give one of "
                   "them a dash pattern or a marker\n")


def test_no_committed_output_holds_a_legend_report():
    reported = []
    for path in sorted(ROOT.glob("book/*.ipynb")):
        for number, cell in enumerate(json.loads(path.read_text())["cells"]):
            for output in cell.get("outputs", []):
                text = output.get("text", "")
                text = "".join(text) if isinstance(text, list) else text
                if LEGEND_WARNING in text:
                    reported.append(f"{path.name} cell {number}: {text.strip()}")
    assert not reported, "\n".join(reported)


def test_mark_every_spaces_markers_by_index():
    from aiayn.figures.style import mark_every

    assert mark_every(1200) == 120 and mark_every(101) == 10 and mark_every(5) == 1
    with pytest.raises(ValueError, match="n_points and n_marks must be positive"):
        mark_every(0)
