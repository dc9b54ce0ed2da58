"""Chapter 8's figures and explorer: Table 1's costs as curves, measured
costs with their fitted slopes, and the hops of the maximum path length.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "LAYER_STYLES",
    "plot_layer_costs",
    "plot_measured_costs",
    "plot_hops",
    "complexity_explorer",
    "complexity_twin",
    "complexity_twin_grid",
    "complexity_caption",
]


#: How every figure of chapter 8 draws Table 1's four layers, each with a colour (at least 40 apart
#: in CIELAB under protanopia, deuteranopia and tritanopia; tests/test_colour_vision.py), a dash
#: pattern and, where measured points are drawn, a marker, so that no line is told by colour alone.
LAYER_STYLES = {
    "self-attention": {"color": "tab:blue", "linestyle": "-", "marker": "o"},
    "recurrent": {"color": "#d55e00", "linestyle": "--", "marker": "s"},
    "convolutional": {"color": "tab:brown", "linestyle": "-.", "marker": "^"},
    "restricted": {"color": "black", "linestyle": (0, (5, 2, 1, 2, 1, 2)), "marker": "D"},
}


def plot_layer_costs(d: int, k: int = 3, r: int = 31, n_max: int = 8192,
                     ax: plt.Axes | None = None) -> plt.Axes:
    """Chapter 8: the FLOPs of Table 1's four layers against ``n`` at width ``d`` (log-log),
    with the self-attention / recurrent crossover at ``n = d`` marked."""
    from ..experiments.costs import LAYER_KINDS, crossover_length, layer_cost

    if ax is None:
        _, ax = plt.subplots()
    ns = np.unique(np.geomspace(4, max(n_max, 8), 80).astype(int))
    for kind in LAYER_KINDS:
        flops = [layer_cost(kind, int(n), d, k=k, r=r).flops for n in ns]
        label = {"convolutional": f"convolutional (k={k})",
                 "restricted": f"restricted (r={r})"}.get(kind, kind)
        style = LAYER_STYLES[kind]
        ax.loglog(ns, flops, color=style["color"], linestyle=style["linestyle"], label=label)
    cross = crossover_length(d)
    if ns[0] <= cross <= ns[-1]:
        ax.axvline(cross, color="0.4", ls=":", lw=1)  # dotted: a reference, not a layer
        ax.annotate(f"n = d = {d}", (cross, ax.get_ylim()[0]), xytext=(4, 6),
                    textcoords="offset points", fontsize=9, color="0.3")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("FLOPs per layer (one sequence)")
    ax.set_title(f"Table 1 as FLOPs, d = {d}")
    ax.legend(fontsize=8)
    return ax


def plot_measured_costs(x: Sequence[float], values: dict, slopes: dict | None = None,
                        xlabel: str = "sequence length n", ylabel: str = "seconds",
                        title: str | None = None, ax: plt.Axes | None = None) -> plt.Axes:
    """Chapter 8: measured times (or bytes) of each layer kind against ``x`` on log-log
    axes; ``slopes`` (fitted exponents) go into the legend."""
    if ax is None:
        _, ax = plt.subplots()
    for name, ys in values.items():
        label = name if not slopes or name not in slopes else f"{name} (slope {slopes[name]:.2f})"
        ax.loglog(x, ys, **LAYER_STYLES.get(name, {"marker": "o"}), label=label, ms=4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_hops(hops: dict, fig: plt.Figure | None = None) -> plt.Figure:
    """Chapter 8: one heatmap per layer kind: how many layers (or recurrent steps) until
    output ``i`` depends on input ``j``; white where it never does."""
    if fig is None:
        fig = plt.figure(figsize=(3.0 * len(hops), 3.2))
    axes = fig.subplots(1, len(hops), squeeze=False)[0]
    vmax = max(int(torch.as_tensor(h).max()) for h in hops.values())
    for ax, (name, h) in zip(axes, hops.items(), strict=True):
        h = torch.as_tensor(h).float()
        shown = np.ma.masked_where(h.numpy() == 0, h.numpy())
        image = ax.imshow(shown, cmap="viridis", vmin=1, vmax=vmax)
        ax.set_title(f"{name}\nmax {int(h.max())}", fontsize=10)
        ticks = range(0, h.shape[0], max(1, h.shape[0] // 4))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("input j")
    axes[0].set_ylabel("output i")
    fig.colorbar(image, ax=list(axes), fraction=0.02, pad=0.02, label="hops")
    return fig


#: The live explorer's sliders: (label, smallest, largest, step); k and r are odd.
_SLIDERS = {"d": ("d", 16, 4096, 16), "k": ("kernel k", 3, 31, 2),
            "r": ("window r", 3, 255, 2), "n_max": ("largest n", 64, 65536, 64)}


def _check_setting(**values: int) -> None:
    """Each value must be one the live slider of its name offers."""
    for name, value in values.items():
        _, low, high, step = _SLIDERS[name]
        if (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
                or (value - low) % step):
            raise ValueError(f"{name} must be an int in [{low}, {high}] in steps of {step} "
                             f"(a value of its slider), got {value!r}")


def complexity_explorer(d: int = 512, twin: bool = True, k: int = 3, r: int = 31,
                        n_max: int = 8192):
    """Chapter 8: Table 1's FLOPs against ``n`` for a width ``d``, kernel ``k`` and
    window ``r`` chosen with sliders; the self-attention / recurrent crossover (n = d)
    moves with ``d``. ``d``, ``k``, ``r`` and ``n_max`` (the largest ``n``) are the setting
    shown first, by the live explorer and its twin alike (the twin's grid holds them).
    Returns the widget box."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    _check_setting(d=d, k=k, r=r, n_max=n_max)
    style = {"description_width": "initial"}
    sliders = {name: w.IntSlider(style=style, value=value, min=low, max=high, step=step,
                                 description=label)
               for name, value in (("d", d), ("k", k), ("r", r), ("n_max", n_max))
               for label, low, high, step in [_SLIDERS[name]]}
    width, kernel, window, largest = sliders.values()
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots()
            plot_layer_costs(width.value, kernel.value, window.value, largest.value, ax=ax)
            setting = (width.value, kernel.value, window.value, largest.value)
            show_view(fig, complexity_caption(*setting)[0])

    for control in sliders.values():
        control.observe(redraw, names="value")
    redraw()
    twin = complexity_twin(d, k, r, n_max) if twin and can_build_twin() else None
    return explorer_box([w.HBox([width, kernel]), w.HBox([window, largest]), out], twin)


def complexity_caption(d: int, k: int, r: int, n_max: int) -> tuple[str, dict]:
    """What a view of :func:`complexity_explorer` shows, in words (its alt text and caption,
    live and in the HTML twin), and the numbers behind it: where self-attention and recurrence
    cost the same, and each layer's FLOPs against the recurrent layer's at the largest ``n``
    (the convolution with kernel ``k``, restricted attention with window ``r``)."""
    from ..experiments.costs import crossover_length, layer_cost

    flops = {kind: layer_cost(kind, n_max, d, k=k, r=r).flops
             for kind in ("self-attention", "recurrent", "convolutional", "restricted")}
    ratio = {kind: value / flops["recurrent"] for kind, value in flops.items()}
    cross = crossover_length(d)
    return (f"d = {d}, k = {k}, r = {r}: self-attention and recurrence cost the same at "
            f"n = {cross:g}; at n = {n_max}, FLOPs against recurrence: self-attention "
            f"{ratio['self-attention']:.3g}, convolution {ratio['convolutional']:.3g}, "
            f"restricted attention {ratio['restricted']:.3g}",
            {"crossover": f"{cross:g}", "ratio": f"{ratio['self-attention']:.6g}",
             "conv-ratio": f"{ratio['convolutional']:.6g}",
             "restricted-ratio": f"{ratio['restricted']:.6g}"})


def complexity_twin_grid(d: int = 512, k: int = 3, r: int = 255,
                         n_max: int = 8192) -> dict[str, list[int]]:
    """The values :func:`complexity_twin` offers, per control: both ends of every live
    slider and the opening value (d in 16, ``d``, 4096; k in 3, ``k``, 31; r in 3, ``r``,
    255; the largest n in 64, ``n_max``, 65536)."""
    _check_setting(d=d, k=k, r=r, n_max=n_max)
    chosen = {"d": d, "k": k, "r": r, "n_max": n_max}
    return {name: sorted({low, chosen[name], high})
            for name, (_, low, high, _) in _SLIDERS.items()}


def complexity_twin(d: int = 512, k: int = 3, r: int = 255, n_max: int = 8192):
    """The precomputed twin of :func:`complexity_explorer` for the HTML book, on the grid of
    :func:`complexity_twin_grid` (both ends of every live slider), opening on ``d``, ``k``,
    ``r`` and ``n_max``."""

    def caption(width, k, r, n_max):
        return complexity_caption(width, k, r, n_max)

    grid = complexity_twin_grid(d, k, r, n_max)
    chosen = {"d": d, "k": k, "r": r, "n_max": n_max}
    controls = [Control(_SLIDERS[name][0], [(str(v), v) for v in values],
                        values.index(chosen[name]))
                for name, values in grid.items()]

    def draw(width, k, r, n_max):
        fig, ax = plt.subplots()
        plot_layer_costs(width, k, r, n_max, ax=ax)
        return fig

    return grid_explorer(controls, draw, caption)
