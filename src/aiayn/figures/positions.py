"""Chapter 5's figures and explorer: the sinusoidal table, the
similarity of positions, and accuracy beyond the training length.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from .style import _as_2d
from .views import Control, can_build_twin, check_index, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_positional_encoding",
    "plot_positional_view",
    "plot_accuracy_curves",
    "positional_explorer",
    "positional_twin",
    "positional_twin_grid",
    "positional_caption",
]


def plot_positional_encoding(
    pe, ax: plt.Axes | None = None, title: str | None = None,
    position: int | None = None, dimension: int | None = None,
) -> plt.Axes:
    """Heatmap of a ``(n_positions, d_model)`` encoding table: row = position, column =
    dimension, colour = value in [-1, 1]; optional lines mark one position and one dimension."""
    table = _as_2d(pe)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    image = ax.imshow(table, vmin=-1.0, vmax=1.0, cmap="RdBu_r", aspect="auto",
                      interpolation="nearest")
    ax.set_xlabel("dimension $j$ (even: sin, odd: cos)")
    ax.set_ylabel("position $pos$")
    if position is not None:
        ax.axhline(position, color="tab:orange", linewidth=1.5)
    if dimension is not None:
        ax.axvline(dimension, color="tab:green", linewidth=1.5)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="PE value")
    return ax


def plot_positional_view(
    position: int, dimension: int, d_model: int = 128, n_positions: int = 128,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-5 explorer's view of the sinusoidal table (Section 3.5), four panels:
    the table with the chosen position (row) and dimension (column) marked; the
    encoding vector ``PE[position]``; the chosen dimension across positions (one
    sinusoid, its wavelength in the title); and the similarity
    ``PE[position] . PE[q] / (d_model / 2)`` against every position ``q``
    (1 at ``q = position``: every encoding has squared norm ``d_model / 2``).
    """
    from ..positional import sinusoidal_encoding, wavelengths

    if not isinstance(n_positions, int) or n_positions < 1:
        raise ValueError(f"n_positions must be a positive int, got {n_positions!r}")
    if not 0 <= position < n_positions:
        raise ValueError(f"position must be in [0, {n_positions - 1}], got {position}")
    if not 0 <= dimension < d_model:
        raise ValueError(f"dimension must be in [0, {d_model - 1}], got {dimension}")
    pe = sinusoidal_encoding(n_positions, d_model, torch.float64).numpy()
    if fig is None:
        fig = plt.figure(figsize=(11, 7))
    (ax_map, ax_vec), (ax_dim, ax_sim) = fig.subplots(2, 2)
    plot_positional_encoding(pe, ax=ax_map, position=position, dimension=dimension,
                             title=f"PE table, d_model = {d_model}")
    dims = np.arange(d_model)
    ax_vec.plot(dims[0::2], pe[position, 0::2], color="tab:orange", linewidth=1,
                label="sin (even $j$)")
    ax_vec.plot(dims[1::2], pe[position, 1::2], color="tab:blue", linewidth=1,
                label="cos (odd $j$)")
    ax_vec.plot([dimension], [pe[position, dimension]], "o", color="tab:green")
    ax_vec.legend(loc="lower right", fontsize=8)
    ax_vec.set(xlabel="dimension $j$", ylabel="value", ylim=(-1.1, 1.1),
               title=f"encoding vector PE[{position}]")
    positions = np.arange(n_positions)
    wavelength = float(wavelengths(d_model)[dimension // 2])
    kind = "sin" if dimension % 2 == 0 else "cos"
    ax_dim.plot(positions, pe[:, dimension], color="tab:green", linewidth=1)
    ax_dim.plot([position], [pe[position, dimension]], "o", color="tab:orange")
    ax_dim.set(xlabel="position $pos$", ylabel="value", ylim=(-1.1, 1.1),
               title=f"dimension {dimension} ({kind}), wavelength {wavelength:,.1f}")
    similarity = pe @ pe[position] / (d_model / 2)  # cos similarity: |PE|^2 = d_model / 2
    ax_sim.plot(positions, similarity, color="tab:purple", linewidth=1)
    ax_sim.axvline(position, color="tab:orange", linewidth=1, linestyle="--")
    ax_sim.set(xlabel="position $q$", ylabel="similarity", ylim=(-0.1, 1.05),
               title=f"PE[{position}] · PE[q] / (d_model/2)")
    return fig


def plot_accuracy_curves(
    curves: dict, seen_max: int, chance: float | None = None, ax: plt.Axes | None = None,
    xlabel: str = "sequence length", title: str | None = None, seen_min: int = 0,
) -> plt.Axes:
    """Accuracy curves ``{label: (x, y)}`` with the range seen in training shaded
    (x from ``seen_min`` to ``seen_max``, inclusive) and an optional chance level."""
    if not 0 <= seen_min <= seen_max:
        raise ValueError(f"seen_min must be in [0, seen_max={seen_max}], got {seen_min}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    x_max = max(float(np.max(np.asarray(x))) for x, _ in curves.values())
    seen = f"{seen_min} to {seen_max}" if seen_min else f"≤ {seen_max}"
    ax.axvspan(seen_min - 0.5 if seen_min else 0, seen_max + 0.5, color="0.92",
               label=f"seen in training ({seen})")
    for label, (x, y) in curves.items():
        ax.plot(np.asarray(x), np.asarray(y), marker=".", label=label)
    if chance is not None:
        ax.axhline(chance, color="0.4", linestyle=":", label="chance")
    ax.set(xlabel=xlabel, ylabel="accuracy", ylim=(0, 1.05), xlim=(0, x_max + 0.5))
    if title:
        ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    return ax


def positional_explorer(d_model: int = 128, n_positions: int = 128, twin: bool = True,
                        position: int | None = None, dimension: int = 0):
    """Pick a position and a dimension of the sinusoidal table (chapter 5).

    Redraws :func:`aiayn.figures.positions.plot_positional_view` on every change: the table, the
    encoding vector of the position, the dimension's sinusoid, and the similarity of
    the position's encoding to every other. Both sliders cover their full ranges
    (position 0 to ``n_positions - 1``, dimension 0 to ``d_model - 1``).
    ``twin`` (ipywidgets 8): also build the precomputed twin the HTML book shows
    (:mod:`aiayn.figures.views`). ``position`` (None: 10, or the last position if fewer)
    and ``dimension`` are the setting shown first, by the live explorer and its twin alike
    (the twin offers :func:`positional_twin_grid`).
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w

    from ..positional import sinusoidal_encoding

    position = _opening("position", position, n_positions)
    _opening("dimension", dimension, d_model)
    style = {"description_width": "initial"}
    pos = w.IntSlider(style=style, value=position, min=0, max=n_positions - 1,
                      description="position")
    dim = w.IntSlider(style=style, value=dimension, min=0, max=d_model - 1,
                      description="dimension")
    out = w.Output()
    table = sinusoidal_encoding(n_positions, d_model)  # (n_positions, d_model): for the captions

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_positional_view(pos.value, dim.value, d_model, n_positions)
            show_view(fig, positional_caption(table, pos.value, dim.value)[0])

    for control in (pos, dim):
        control.observe(redraw, names="value")
    redraw()
    twin = (positional_twin(d_model, n_positions, position, dimension)
            if twin and can_build_twin() else None)
    return explorer_box([w.HBox([pos, dim]), out], twin)


def positional_caption(table: torch.Tensor, position: int, dimension: int) -> tuple[str, dict]:
    """What a view of :func:`positional_explorer` shows, in words (its alt text and caption,
    live and in the HTML twin), and the number behind it: the entry of the sinusoidal
    ``table`` (``(n_positions, d_model)``) at the chosen position and dimension."""
    value = float(table[position, dimension])
    return (f"PE[{position}, {dimension}] = {value:.4f}", {"pe": f"{value:.6f}"})


def _opening(name: str, value, n: int, grid: list[int] | None = None) -> int:
    """An opening ``value`` of the control ``name`` (None, for the position: 10 or the last),
    checked against ``range(n)`` and, for the twin, its ``grid``."""
    if value is None and name == "position":
        value = min(10, n - 1)
    check_index(name, value, n)
    if grid is not None and value not in grid:
        raise ValueError(f"{name} must be one of the HTML grid's {grid}, got {value!r}")
    return value


def _grid(n: int, points: tuple[int, ...]) -> list[int]:
    """``points`` that fall inside ``range(n)``, with both ends of the range."""
    return sorted({0, n - 1, *(p for p in points if 0 <= p < n)})


def positional_twin_grid(d_model: int = 128, n_positions: int = 128) -> tuple[list[int], list[int]]:
    """The positions and the dimensions :func:`positional_twin` offers: positions 0, 1, 10,
    50 and the last; dimensions 0, 1, 10, 64 and the last (both ends of both live sliders;
    the points that fall outside a range are left out)."""
    for name, n in (("d_model", d_model), ("n_positions", n_positions)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")
    return _grid(n_positions, (1, 10, 50)), _grid(d_model, (1, 10, 64))


def positional_twin(d_model: int = 128, n_positions: int = 128, position: int | None = None,
                    dimension: int = 0):
    """The precomputed twin of :func:`positional_explorer` for the HTML book, on the grid of
    :func:`positional_twin_grid`, opening on ``position`` (None: 10, or the last position if
    fewer) and ``dimension``, which must be on the grid."""
    from ..positional import sinusoidal_encoding

    positions, dimensions = positional_twin_grid(d_model, n_positions)
    position = _opening("position", position, n_positions, positions)
    _opening("dimension", dimension, d_model, dimensions)
    table = sinusoidal_encoding(n_positions, d_model)

    def caption(position, dimension):
        return positional_caption(table, position, dimension)

    controls = [Control("position", [(str(p), p) for p in positions],
                        positions.index(position)),
                Control("dimension", [(str(i), i) for i in dimensions],
                        dimensions.index(dimension))]
    return grid_explorer(
        controls, lambda p, i: plot_positional_view(p, i, d_model, n_positions), caption)
