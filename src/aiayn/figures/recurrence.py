"""Chapter 1's figure and explorer: how a gradient decays through a
recurrent chain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .style import MARKERS, mark_every
from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_gradient_decay",
    "gradient_decay_explorer",
    "gradient_decay_twin",
    "TWIN_RADII",
    "TWIN_LENGTHS",
    "gradient_decay_caption",
]


def plot_gradient_decay(
    radii: Sequence[float],
    length: int = 100,
    d_model: int = 64,
    input_std: float = 0.1,
    seed: int = 0,
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Gradient norm ``||dL/dh_{n-k}||`` against the distance ``k`` for recurrent layers
    whose ``W_hh`` has spectral radius ``radii`` (one solid curve each), with the linear
    prediction ``radius**k`` dashed. Computed by :func:`aiayn.experiments.recurrence.gradient_decay`."""
    from ..experiments.recurrence import fit_geometric_rate, gradient_decay

    radii = list(radii)
    if not radii:
        raise ValueError("radii must hold at least one spectral radius")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    k = np.arange(length + 1)
    low, high = 0.0, 0.0  # log10 range of the measured curves
    for i, radius in enumerate(radii):
        log_norms = gradient_decay(radius, length, d_model, input_std, seed=seed)
        rate = fit_geometric_rate(log_norms, start=min(10, length - 1))
        log10 = log_norms.numpy() / math.log(10)
        low, high = min(low, log10.min()), max(high, log10.max())
        color = f"C{i % 10}"  # the dashes mean "prediction": the curves differ by marker
        ax.semilogy(k, 10.0 ** np.clip(log10, -300, 300), color=color, linestyle="-",
                    marker=MARKERS[i % len(MARKERS)], markevery=mark_every(len(k)), markersize=4,
                    label=f"radius {radius:g}: rate {rate:.3f}")
        reference = np.clip(k * math.log10(radius), -300, 300)
        ax.semilogy(k, 10.0 ** reference, color=color, linestyle="--", linewidth=0.8)
    ax.set_ylim(10.0 ** max(low - 1, -300), 10.0 ** min(high + 1, 300))
    ax.axhline(1.0, color="gray", linewidth=0.5)
    ax.set_xlabel("distance $n - t$ (steps)")
    ax.set_ylabel(r"$\|\partial L / \partial h_t\|$")
    ax.set_title(f"gradient through a tanh RNN (dashed: radius$^{{n-t}}$), d={d_model}")
    ax.legend(fontsize=8, loc="best")
    return ax


def gradient_decay_explorer(d_model: int = 64, input_std: float = 0.1, seed: int = 0,
                            twin: bool = True):
    """Move the spectral radius of ``W_hh`` and the sequence length; the curve of the
    gradient norm against distance redraws (:func:`aiayn.figures.recurrence.plot_gradient_decay`).

    The radius spans 0.3 to 2.5 and the length 10 to 300 steps; the norms are carried
    as logarithms, so neither extreme underflows, overflows or gives NaN.
    ``twin`` (ipywidgets 8): also build the precomputed twin the HTML book shows
    (:mod:`aiayn.figures.views`).
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w

    radius = w.FloatSlider(style={"description_width": "initial"}, value=0.9, min=0.3, max=2.5, step=0.05,
                           description="radius", readout_format=".2f")
    length = w.IntSlider(style={"description_width": "initial"}, value=100, min=10, max=300, step=10, description="length")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            ax = plot_gradient_decay([radius.value], length.value, d_model, input_std, seed)
            text, _ = gradient_decay_caption(radius.value, length.value, d_model, input_std, seed)
            show_view(ax.figure, text)

    for control in (radius, length):
        control.observe(redraw, names="value")
    redraw()
    twin = gradient_decay_twin(d_model, input_std, seed) if twin and can_build_twin() else None
    return explorer_box([w.HBox([radius, length]), out], twin)


def gradient_decay_caption(radius: float, length: int, d_model: int = 64, input_std: float = 0.1,
                           seed: int = 0) -> tuple[str, dict]:
    """What a view of :func:`gradient_decay_explorer` shows, in words (its alt text and
    caption, live and in the HTML twin), and the number behind it: the gradient's size
    ``length`` steps back, as a power of ten."""
    from ..experiments.recurrence import gradient_decay

    log_norms = gradient_decay(radius, length, d_model, input_std, seed=seed)
    log10_far = float(log_norms[-1]) / math.log(10)
    text = f"radius {radius:g}: the gradient {length} steps back is 10^{log10_far:.1f}"
    return text, {"log10-far": f"{log10_far:.4f}"}


#: Radii the HTML book's explorer offers, around 1 (where the decay turns into growth) and
#: at both ends of the live slider.
TWIN_RADII = (0.3, 0.7, 0.9, 1.0, 1.1, 1.5, 2.5)
#: Lengths the HTML book's explorer offers, the live slider's ends and its default.
TWIN_LENGTHS = (10, 100, 300)


def gradient_decay_twin(d_model: int = 64, input_std: float = 0.1, seed: int = 0):
    """The precomputed twin of :func:`gradient_decay_explorer` for the HTML book: the radii
    of :data:`TWIN_RADII` and the lengths of :data:`TWIN_LENGTHS`."""

    def caption(radius, length):
        return gradient_decay_caption(radius, length, d_model, input_std, seed)

    controls = [Control("radius", [(f"{r:g}", r) for r in TWIN_RADII], TWIN_RADII.index(0.9)),
                Control("length", [(str(n), n) for n in TWIN_LENGTHS], TWIN_LENGTHS.index(100))]
    return grid_explorer(
        controls,
        lambda radius, length: plot_gradient_decay([radius], length, d_model, input_std,
                                                   seed).figure,
        caption)
