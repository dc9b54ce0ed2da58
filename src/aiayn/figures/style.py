"""The book's plotting style, shared by every figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["use_book_style"]


#: Markers of the book's line cycle: each line of a legend differs from the others by its marker
#: as well as its colour, for readers who cannot tell the colours apart (issue 26).
LINE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _line_cycle():
    """Matplotlib's first colours, each with its own marker, drawn at every tenth of the line's
    length (``markevery=0.1``) so that dense curves stay lines. A line given a format string
    (``"k--"``) or its own marker keeps them."""
    from cycler import cycler

    colors = plt.rcParamsDefault["axes.prop_cycle"].by_key()["color"][:len(LINE_MARKERS)]
    return (cycler(color=colors) + cycler(marker=list(LINE_MARKERS))
            + cycler(markevery=[0.1] * len(LINE_MARKERS)))


def use_book_style() -> None:
    """One look for every figure of the book: readable fonts, no top/right spines, lines told
    apart by marker as well as colour, PNG output."""
    plt.rcParams.update({
        "axes.prop_cycle": _line_cycle(),
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
    })
    try:  # PNG only: SVG text is not byte-stable and nbval compares outputs
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # not in IPython
        pass


def _as_2d(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double().numpy()
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D (queries, keys) matrix, got shape {weights.shape}")
    return weights
