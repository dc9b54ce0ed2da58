"""Chapter 8's figures and explorer: Table 1's costs as curves, measured
costs with their fitted slopes, and the hops of the maximum path length.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .views import Control, can_build_twin, explorer_box, grid_explorer

__all__ = [
    "plot_layer_costs",
    "plot_measured_costs",
    "plot_hops",
    "complexity_explorer",
    "complexity_twin",
]


_LAYER_COLORS = {"self-attention": "#4c72b0", "recurrent": "#dd8452",
                 "convolutional": "#55a868", "restricted": "#8172b3"}


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
        ax.loglog(ns, flops, color=_LAYER_COLORS[kind], label=label)
    cross = crossover_length(d)
    if ns[0] <= cross <= ns[-1]:
        ax.axvline(cross, color="0.4", ls="--", lw=1)
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
        ax.loglog(x, ys, "o-", color=_LAYER_COLORS.get(name), label=label, ms=4)
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


def complexity_explorer(d: int = 512, twin: bool = True):
    """Chapter 8: Table 1's FLOPs against ``n`` for a width ``d``, kernel ``k`` and
    window ``r`` chosen with sliders; the self-attention / recurrent crossover (n = d)
    moves with ``d``. Returns the widget box."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    width = w.IntSlider(style={"description_width": "initial"}, value=d, min=16, max=4096, step=16, description="d")
    kernel = w.IntSlider(style={"description_width": "initial"}, value=3, min=3, max=31, step=2, description="kernel k")
    window = w.IntSlider(style={"description_width": "initial"}, value=31, min=3, max=255, step=2, description="window r")
    n_max = w.IntSlider(style={"description_width": "initial"}, value=8192, min=64, max=65536, step=64, description="largest n")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots()
            plot_layer_costs(width.value, kernel.value, window.value, n_max.value, ax=ax)
            display(fig)
            plt.close(fig)

    for control in (width, kernel, window, n_max):
        control.observe(redraw, names="value")
    redraw()
    twin = complexity_twin(d) if twin and can_build_twin() else None
    return explorer_box([w.HBox([width, kernel]), w.HBox([window, n_max]), out], twin)


def complexity_twin(d: int = 512):
    """The precomputed twin of :func:`complexity_explorer` for the HTML book, on a grid that
    holds both ends of every live slider: d in 16, 512 (or the chapter's ``d``) and 4096;
    k in 3 and 31; r in 3 and 255; the largest n in 64, 8192 and 65536."""
    from ..experiments.costs import crossover_length, layer_cost

    def caption(width, k, r, n_max):
        attention = layer_cost("self-attention", n_max, width).flops
        recurrent = layer_cost("recurrent", n_max, width).flops
        cross = crossover_length(width)
        return (f"d = {width}: self-attention and recurrence cost the same at n = {cross:g}; "
                f"at n = {n_max} attention / recurrent FLOPs = {attention / recurrent:.3g}",
                {"crossover": f"{cross:g}", "ratio": f"{attention / recurrent:.6g}"})

    widths = sorted({16, d, 4096})
    controls = [Control("d", [(str(v), v) for v in widths], widths.index(d)),
                Control("kernel k", [(str(v), v) for v in (3, 31)], 0),
                Control("window r", [(str(v), v) for v in (3, 255)], 1),
                Control("largest n", [(str(v), v) for v in (64, 8192, 65536)], 1)]

    def draw(width, k, r, n_max):
        fig, ax = plt.subplots()
        plot_layer_costs(width, k, r, n_max, ax=ax)
        return fig

    return grid_explorer(controls, draw, caption)
