"""Chapter 2's figures and explorer: an attention map, a query's
weights as bars, and the explorer that redraws them for a chosen query and temperature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .style import _as_2d
from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_attention",
    "plot_weight_bars",
    "plot_attention_view",
    "attention_explorer",
    "attention_twin",
    "TWIN_TEMPERATURES",
    "attention_caption",
]


def plot_attention(
    weights,
    row_tokens: Sequence[str] | None = None,
    col_tokens: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    annotate: bool = True,
    title: str | None = None,
) -> plt.Axes:
    """Heatmap of a ``(T, S)`` attention matrix: row = query token, column = key token."""
    w = _as_2d(weights)
    rows = list(row_tokens) if row_tokens is not None else [str(i) for i in range(w.shape[0])]
    cols = list(col_tokens) if col_tokens is not None else [str(j) for j in range(w.shape[1])]
    if len(rows) != w.shape[0] or len(cols) != w.shape[1]:
        raise ValueError(
            f"got {len(rows)} row and {len(cols)} column labels for weights of shape {w.shape}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * len(cols), 0.8 + 0.45 * len(rows)))
    image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    if annotate and w.size <= 144:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_weight_bars(
    row, tokens: Sequence[str], ax: plt.Axes | None = None, highlight: int | None = None,
    title: str | None = None,
) -> plt.Axes:
    """Bar chart of one query's attention distribution over the keys."""
    w = _as_2d(np.atleast_2d(row.detach().cpu().numpy() if isinstance(row, torch.Tensor) else row))[0]
    if len(tokens) != w.shape[0]:
        raise ValueError(f"got {len(tokens)} tokens for {w.shape[0]} weights")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.0))
    colors = ["tab:orange" if j == highlight else "tab:blue" for j in range(len(tokens))]
    ax.bar(range(len(tokens)), w, color=colors)
    ax.set_xticks(range(len(tokens)), list(tokens), rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("attention weight")
    if title:
        ax.set_title(title)
    return ax


def plot_attention_view(
    tokens: Sequence[str],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query_index: int = 0,
    temperature: float = 1.0,
    causal: bool = False,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-2 explorer's view: the whole weight matrix and one query's row.

    Scores are ``q.k / (sqrt(d_k) * temperature)``: temperature 1 is the paper's
    scaling, small temperatures sharpen the softmax towards a one-hot row, large
    ones flatten it towards uniform.
    """
    from ..attention import scaled_dot_product_attention
    from ..masks import causal_mask

    n = len(tokens)
    if not 0 <= query_index < n:
        raise ValueError(f"query_index must be in [0, {n - 1}], got {query_index}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    mask = causal_mask(n, device=query.device) if causal else None
    scale = 1.0 / (math.sqrt(query.shape[-1]) * temperature)
    _, weights = scaled_dot_product_attention(query, key, value, mask, scale=scale)
    if fig is None:
        fig = plt.figure(figsize=(10, 4))
    ax_map, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    plot_attention(weights, tokens, tokens, ax=ax_map, annotate=n <= 6,
                   title=f"weights (temperature {temperature:.3g}{', causal' if causal else ''})")
    ax_map.add_patch(plt.Rectangle((-0.5, query_index - 0.5), n, 1, fill=False,
                                   edgecolor="tab:orange", linewidth=2))
    row = weights[query_index]
    plot_weight_bars(row, tokens, ax=ax_bar, highlight=int(row.argmax()),
                     title=f"query '{tokens[query_index]}': max {float(row.max()):.2f}")
    return fig


def attention_explorer(
    tokens: Sequence[str], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    twin: bool = True, query_index: int = 0,
):
    """Pick a query token, change the softmax temperature, toggle the causal mask.

    Redraws :func:`aiayn.figures.attention.plot_attention_view` on every change. The temperature
    slider spans 0.01 to 100 on a log scale; both ends stay finite (the softmax
    subtracts the row maximum), so no setting produces NaN.
    ``query_index`` is the query shown first (the most instructive one for the reader).
    ``twin`` (ipywidgets 8): also build the precomputed twin the HTML book shows
    (:mod:`aiayn.figures.views`).
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w

    if len(tokens) != query.shape[-2]:
        raise ValueError(f"got {len(tokens)} tokens for {query.shape[-2]} query rows")
    if not (isinstance(query_index, int) and 0 <= query_index < len(tokens)):
        raise ValueError(f"query_index must be in [0, {len(tokens) - 1}], got {query_index!r}")
    wide = {"description_width": "initial"}  # labels in full, not cut to "temperat..."
    pick = w.Dropdown(options=[(t, i) for i, t in enumerate(tokens)], value=query_index,
                      description="query", style=wide)
    temperature = w.FloatLogSlider(value=1.0, base=10, min=-2, max=2, step=0.05,
                                   description="temperature", readout_format=".2f", style=wide)
    causal = w.Checkbox(value=False, description="causal mask", style=wide)
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            setting = (pick.value, temperature.value, causal.value)
            # show_view, not plt.show(fig): show() takes no figure (TypeError on non-inline
            # backends); show_view closes the figure and gives the image its alt text.
            show_view(plot_attention_view(tokens, query, key, value, *setting),
                      attention_caption(tokens, query, key, value, *setting)[0])

    for control in (pick, temperature, causal):
        control.observe(redraw, names="value")
    redraw()
    twin = (attention_twin(tokens, query, key, value, query_index)
            if twin and can_build_twin() else None)
    return explorer_box([w.HBox([pick, temperature, causal]), out], twin)


def attention_caption(tokens: Sequence[str], query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, query_index: int, temperature: float,
                      causal: bool) -> tuple[str, dict]:
    """What a view of :func:`attention_explorer` shows, in words (its alt text and caption,
    live and in the HTML twin), and the numbers behind it: the token the query puts most
    weight on, and the query's row of weights."""
    from ..attention import scaled_dot_product_attention
    from ..masks import causal_mask

    mask = causal_mask(len(tokens), device=query.device) if causal else None
    scale = 1.0 / (math.sqrt(query.shape[-1]) * temperature)
    _, weights = scaled_dot_product_attention(query, key, value, mask, scale=scale)
    row = weights[query_index]
    top = int(row.argmax())
    text = (f"query '{tokens[query_index]}': most weight on '{tokens[top]}' "
            f"({float(row[top]):.3f})")
    return text, {"top": top, "weights": ",".join(f"{float(x):.4f}" for x in row)}


#: The temperatures the HTML book's explorer offers (the live slider's ends and three between).
TWIN_TEMPERATURES = (0.01, 0.1, 1.0, 10.0, 100.0)


def attention_twin(tokens: Sequence[str], query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, query_index: int = 0):
    """The precomputed twin of :func:`attention_explorer` for the HTML book: every query token,
    the temperatures of :data:`TWIN_TEMPERATURES`, the causal mask off and on."""

    def caption(query_index, temperature, causal):
        return attention_caption(tokens, query, key, value, query_index, temperature, causal)

    controls = [
        Control("query", [(t, i) for i, t in enumerate(tokens)], query_index, "dropdown"),
        Control("temperature", [(f"{t:g}", t) for t in TWIN_TEMPERATURES], 2),
        Control("causal mask", [("off", False), ("on", True)], 0, "toggle"),
    ]
    return grid_explorer(
        controls, lambda q, t, c: plot_attention_view(tokens, query, key, value, q, t, c),
        caption)
