"""The book's plotting style, shared by every figure.

Lines of one legend must differ by more than their colour, for readers who do not tell the
colours apart: the style's cycle gives each colour its own dash pattern, and every figure
drawn under the style is checked (:func:`legend_problems`, reported on stderr).
"""

from __future__ import annotations

import sys

import matplotlib.pyplot as plt
import numpy as np
import torch
from cycler import cycler
from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D

__all__ = ["BOOK_LINE_STYLES", "MARKERS", "legend_problems", "mark_every", "use_book_style",
           "watch_legends"]

#: One dash pattern for each colour of matplotlib's ten default colours, in their order (solid,
#: dashed, dash-dot, short dashes, long dashes, dash-dot-dot, long dash-short dash, dash and
#: three dots, dense dashes, and long dash-dot). The style's cycle pairs them, so a line that
#: sets neither its colour nor its dashes differs from the others by both. Dots are left out:
#: a dotted line (":", or sparse dots, (0, (1, 4))) is a reference level (chance, a floor, a
#: bar), and no data line is drawn that way.
BOOK_LINE_STYLES = [
    "-", "--", "-.", (0, (2, 2)), (0, (10, 3)), (0, (5, 2, 1, 2, 1, 2)), (0, (10, 2, 3, 2)),
    (0, (4, 2, 1, 1, 1, 1, 1, 2)), (0, (3, 1)), (0, (10, 2, 1, 2)),
]
#: Markers for figures whose dashes already carry a meaning (a measured curve solid, its
#: prediction dashed): there the curves of one legend differ by marker, one per colour.
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
_DEFAULT_COLOURS = plt.rcParamsDefault["axes.prop_cycle"].by_key()["color"]  # matplotlib's ten
#: The first words of what :func:`watch_legends` prints, which a committed output must not hold.
LEGEND_WARNING = "aiayn legend check"


def use_book_style() -> None:
    """One look for every figure of the book: readable fonts, no top/right spines, PNG output,
    a dash pattern with each colour of the cycle, and a check of every new figure's legends
    when it is drawn (:func:`watch_legends`)."""
    plt.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": False,
        "image.cmap": "Blues",
        "figure.constrained_layout.use": True,
        "axes.prop_cycle": cycler(color=_DEFAULT_COLOURS) + cycler(linestyle=BOOK_LINE_STYLES),
        "figure.hooks": ["aiayn.figures.style:watch_legends"],
    })
    try:  # PNG only: SVG text is not byte-stable and nbval compares outputs
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # not in IPython
        pass


def mark_every(n_points: int, n_marks: int = 10) -> int:
    """``markevery`` for about ``n_marks`` markers on a line of ``n_points`` points, spaced by
    index (spacing by length along the line would crowd them where a curve is noisy)."""
    if n_points < 1 or n_marks < 1:
        raise ValueError(f"n_points and n_marks must be positive, got {n_points} and {n_marks}")
    return max(1, round(n_points / n_marks))


def _dashes(line: Line2D) -> tuple:
    """What a reader sees of a line apart from its colour: its dash pattern (as drawn, so that
    "--" and (0, (3.7, 1.6)) compare equal), its marker, and whether it is drawn at all."""
    drawn = line.get_linestyle() not in ("None", " ", "")
    _, pattern = line._unscaled_dash_pattern  # public API gives only the named style
    return drawn, tuple(pattern) if (drawn and pattern) else None, line.get_marker()


def _label(figure, legend, number: int) -> str:
    """How a report names a legend: its number in the figure, and its axes' or figure's title."""
    axes = legend.axes  # None for a figure legend
    title = (axes.get_title() if axes is not None else "") or (
        figure._suptitle.get_text() if figure._suptitle else "")
    return f"legend {number + 1}" + (f" ({title!r})" if title else "")


def _entry_line(handle) -> Line2D | None:
    """The line a legend entry stands for: the line itself, or an error bar's data line."""
    if isinstance(handle, ErrorbarContainer):
        handle = handle.lines[0]
    return handle if isinstance(handle, Line2D) else None


def legend_problems(figure) -> list[str]:
    """The pairs of lines in one legend of ``figure`` that differ only by colour: the same dash
    pattern and the same marker. Entries that are not lines (bars, patches) are not compared."""
    plotted = {}  # label: the artist it was given to (the legend draws copies)
    for ax in figure.axes:
        handles, labels = ax.get_legend_handles_labels()
        plotted.update(zip(labels, handles, strict=True))
    legends = [ax.get_legend() for ax in figure.axes] + list(figure.legends)
    problems = []
    for number, legend in enumerate(filter(None, legends)):
        seen: dict[tuple, str] = {}
        for text, drawn in zip(legend.get_texts(), legend.legend_handles, strict=True):
            line = _entry_line(plotted.get(text.get_text(), drawn))
            if line is None:
                continue
            key = _dashes(line)
            if key in seen:
                problems.append(f"{_label(figure, legend, number)}: {seen[key]!r} and "
                                f"{text.get_text()!r} differ only by colour")
            else:
                seen[key] = text.get_text()
    return problems


def watch_legends(figure) -> None:
    """Report :func:`legend_problems` on stderr when ``figure`` is first drawn (the style's
    ``figure.hooks`` calls this for every new pyplot figure). In a notebook the report is an
    output of the cell, which the book's tests would find there."""

    def check(event) -> None:
        if getattr(figure, "_aiayn_legends_checked", False):
            return
        figure._aiayn_legends_checked = True
        for problem in legend_problems(figure):
            print(f"{LEGEND_WARNING}: {problem}; give one of them a dash pattern or a marker",
                  file=sys.stderr)

    figure.canvas.mpl_connect("draw_event", check)


def _as_2d(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double().numpy()
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D (queries, keys) matrix, got shape {weights.shape}")
    return weights
