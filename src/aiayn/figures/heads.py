"""Chapter 4's figures and explorer: every head's attention map, the mass
each head puts on a relation, and the explorer over models, layers and heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .style import _as_2d
from .views import Control, can_build_twin, check_index, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_head_maps",
    "plot_head_masses",
    "plot_head_view",
    "head_explorer",
    "head_twin",
    "head_caption",
    "RELATION_COLORS",
]


#: Chapter 4's relation colours, blue and orange for the previous and the matching token (they
#: stay apart under the common colour-vision deficiencies, as green and orange do not; see
#: tests/test_colour_vision.py).
RELATION_COLORS = {"previous": "tab:blue", "matching": "tab:orange", "itself": "tab:gray",
                   "elsewhere": "#e0e0e0"}


def _mark_relations(ax: plt.Axes, n_rows: int, matching: Sequence[int] | None) -> None:
    """Outline, in each query row, the previous token (blue) and the matching one (orange,
    dashed). Each outline has a white rim, so that the blue one shows on the map's blue cells."""
    from matplotlib import patheffects

    rim = [patheffects.Stroke(linewidth=3.5, foreground="white"), patheffects.Normal()]
    for t in range(n_rows):
        if t > 0:
            ax.add_patch(plt.Rectangle((t - 1.5, t - 0.5), 1, 1, fill=False,
                                       edgecolor=RELATION_COLORS["previous"], linewidth=1.5,
                                       path_effects=rim))
        if matching is not None:
            ax.add_patch(plt.Rectangle((int(matching[t]) - 0.5, t - 0.5), 1, 1, fill=False,
                                       edgecolor=RELATION_COLORS["matching"], linewidth=1.5,
                                       linestyle="--", path_effects=rim))


def plot_head_maps(
    maps: Sequence,
    tokens: Sequence[str],
    titles: Sequence[str],
    matching: Sequence[int] | None = None,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """One ``(T, T)`` attention map per panel, side by side, with the previous token
    (blue) and the matching token (orange, dashed) outlined in every query row."""
    if len(maps) != len(titles) or not maps:
        raise ValueError(f"got {len(maps)} maps and {len(titles)} titles; need one title per map")
    n = len(tokens)
    if fig is None:
        fig = plt.figure(figsize=(3.3 * len(maps) + 0.8, 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(maps), sharey=True))
    for ax, weights, title in zip(axes, maps, titles, strict=True):
        w = _as_2d(weights)
        if w.shape != (n, n):
            raise ValueError(f"each map must be ({n}, {n}) for {n} tokens, got {w.shape}")
        image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
        ax.set_xticks(range(n), list(tokens), rotation=90, fontsize=8)
        ax.set_yticks(range(n), list(tokens), fontsize=8)
        ax.set_xlabel("key")
        ax.set_title(title, fontsize=10)
        _mark_relations(ax, n, matching)
    axes[0].set_ylabel("query")
    fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02, label="weight")
    return fig


def plot_head_masses(
    summaries: dict[str, dict[str, float]],
    measures: Sequence[str] = ("previous", "matching", "itself"),
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Grouped bars: for each head (a key of ``summaries``), its mean attention mass on
    the previous token, the matching token and itself (rows of
    :func:`aiayn.experiments.heads.head_summary`)."""
    if not summaries:
        raise ValueError("summaries must name at least one head")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2))
    names = list(summaries)
    width = 0.8 / len(measures)
    for i, measure in enumerate(measures):
        heights = [summaries[name][measure] for name in names]
        ax.bar(np.arange(len(names)) + (i - (len(measures) - 1) / 2) * width, heights,
               width, label=measure, color=RELATION_COLORS.get(measure))
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean attention mass")
    ax.legend(frameon=False, ncols=len(measures), loc="upper right")
    return ax


def plot_head_view(
    maps,
    tokens: Sequence[str],
    layer: int = 0,
    head: int = 0,
    matching: Sequence[int] | None = None,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-4 explorer's view of one input: the map of one head of one layer
    (``maps`` is ``(L, H, T, T)``), and the share of each query's attention that lands
    on the previous token, the matching token, itself, and elsewhere. Where the matching token
    is the previous token, its weight is one segment (blue, hatched orange), counted once; the
    title's means count it for both relations, as the chapter's table does."""
    maps = torch.as_tensor(maps).detach().cpu().double()
    if maps.dim() != 4 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"maps must be (layers, heads, T, T), got shape {tuple(maps.shape)}")
    n_layers, n_heads, n, _ = maps.shape
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {layer}")
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in [0, {n_heads - 1}], got {head}")
    if len(tokens) != n:
        raise ValueError(f"got {len(tokens)} tokens for maps of {n} positions")
    w = maps[layer, head]
    t = torch.arange(n)
    previous = torch.zeros(n, dtype=w.dtype)
    previous[1:] = w[t[1:], t[1:] - 1]
    itself = w.diagonal()
    match = (w[t, torch.as_tensor(list(matching))] if matching is not None
             else torch.zeros(n, dtype=w.dtype))
    # (T,): queries whose matching token is their previous token: one weight, drawn once
    same = torch.zeros(n, dtype=torch.bool)
    if matching is not None:
        same[1:] = torch.as_tensor(list(matching))[1:] == t[1:] - 1
    both = previous * same
    other = (1 - previous - itself - match + both).clamp_min(0)
    if fig is None:
        fig = plt.figure(figsize=(10, 4))
    ax_map, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.05, 1]})
    image = ax_map.imshow(w.numpy(), vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    ax_map.set_xticks(range(n), list(tokens), rotation=90, fontsize=8)
    ax_map.set_yticks(range(n), list(tokens), fontsize=8)
    ax_map.set_xlabel("key")
    ax_map.set_ylabel("query")
    counted = f"heads 0 to {n_heads - 1}" if n_heads > 1 else "the only head"
    ax_map.set_title(f"layer {layer}, head {head} ({counted})")
    _mark_relations(ax_map, n, matching)
    fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04, label="weight")
    bottom = np.zeros(n)
    segments = [(previous - both, "previous", {"color": RELATION_COLORS["previous"]})]
    if same.any():  # blue hatched orange: one weight that is both relations
        segments.append((both, "previous = matching",
                         {"color": RELATION_COLORS["previous"], "hatch": "//",
                          "edgecolor": RELATION_COLORS["matching"], "linewidth": 0}))
    segments += [(part, label, {"color": RELATION_COLORS[label]})
                 for part, label in ((match - both, "matching"), (itself, "itself"),
                                     (other, "elsewhere"))]
    for part, label, style in segments:
        ax_bar.barh(range(n), part.numpy(), left=bottom, label=label, **style)
        bottom += part.numpy()
    ax_bar.set_yticks(range(n), list(tokens), fontsize=8)
    ax_bar.invert_yaxis()  # same row order as the map
    ax_bar.set_xlim(0, 1)
    ax_bar.set_xlabel("share of the query's attention")
    ax_bar.legend(frameon=False, ncols=3 if same.any() else 4, fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.13))  # below the axis: no bar hidden
    # over the queries after the first, as the chapter's table (query 0 has no previous token)
    prev_mean = float(previous[1:].mean()) if n > 1 else 0.0
    match_mean = float(match[1:].mean()) if n > 1 else 0.0
    ax_bar.set_title(f"mean: previous {prev_mean:.2f}, matching {match_mean:.2f}")
    return fig


def _check_opening(maps: dict, n_inputs: int, model, layer, head, example) -> str:
    """The explorer's opening setting (``model`` None: the first) must be one of its options;
    returns the model's name. ``maps`` maps a name to ``(L, N, H, T, T)`` maps."""
    model = next(iter(maps)) if model is None else model
    if model not in maps:
        raise ValueError(f"model must be one of {list(maps)}, got {model!r}")
    n_layers, _, n_heads = maps[model].shape[:3]
    for name, value, n in (("layer", layer, n_layers), ("head", head, n_heads),
                           ("example", example, n_inputs)):
        check_index(name, value, n)
    return model


def head_explorer(models: dict, tokens: torch.Tensor, labels: Sequence[Sequence[str]],
                  matching: torch.Tensor | None = None, twin: bool = True,
                  model: str | None = None, layer: int = 0, head: int = 0, example: int = 0):
    """Chapter 4: pick a trained model, a layer, a head and an input; the map redraws.

    ``models`` maps a name to a model with an ``attention_maps(tokens)`` method returning
    ``(L, B, H, T, T)`` (e.g. :class:`aiayn.experiments.heads.TinyEncoder`); ``tokens`` ``(N, T)``
    are the inputs to choose from, ``labels`` their printed tokens, ``matching`` ``(N, T)``
    the position of each token's match (outlined in orange). The maps are computed once, so
    every control only redraws :func:`aiayn.figures.heads.plot_head_view`. Switching the model resets
    the layer and head menus to what that model has.
    ``twin`` (ipywidgets 8): also build the precomputed twin the HTML book shows
    (:mod:`aiayn.figures.views`). ``model`` (a key of ``models``; None: the first), ``layer``,
    ``head`` and ``example`` (an input's row) are the setting shown first, by the live
    explorer and its twin alike.
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w

    if not models:
        raise ValueError("models must name at least one model")
    if tokens.dim() != 2 or len(labels) != tokens.shape[0]:
        raise ValueError(f"got {len(labels)} label rows for tokens of shape {tuple(tokens.shape)}")
    if matching is not None and matching.shape != tokens.shape:
        raise ValueError(f"matching must have the shape of tokens {tuple(tokens.shape)}, "
                         f"got {tuple(matching.shape)}")
    maps = {name: m.attention_maps(tokens).cpu() for name, m in models.items()}  # (L, N, H, T, T)
    opening = _check_opening(maps, tokens.shape[0], model, layer, head, example)
    start = (layer, head)  # the first menus open on these, later model switches on 0, 0

    style = {"description_width": "initial"}
    model = w.Dropdown(style=style, options=list(models), value=opening, description="model")
    layer = w.Dropdown(style=style, description="layer")
    head = w.Dropdown(style=style, description="head")
    example = w.IntSlider(style=style, value=example, min=0, max=tokens.shape[0] - 1,
                          description="input")
    out = w.Output()
    updating = False

    def set_menus(chosen=(0, 0)):
        n_layers, _, n_heads = maps[model.value].shape[:3]
        layer.options = list(range(n_layers))
        head.options = list(range(n_heads))
        layer.value, head.value = chosen

    def redraw(*_):
        if updating:
            return
        with out:
            out.clear_output(wait=True)
            i = example.value
            fig = plot_head_view(
                maps[model.value][:, i], labels[i], layer.value, head.value,
                None if matching is None else matching[i].tolist(),
            )
            text, _ = head_caption(maps, model.value, layer.value, head.value, i)
            show_view(fig, text)

    def on_model(*_):
        nonlocal updating
        updating = True  # changing the menus fires their observers: draw once, after
        try:
            set_menus()
        finally:
            updating = False
        redraw()

    set_menus(start)
    model.observe(on_model, names="value")
    for control in (layer, head, example):
        control.observe(redraw, names="value")
    redraw()
    twin = (head_twin(maps, labels, matching, opening, *start, example.value)
            if twin and can_build_twin() else None)
    return explorer_box([w.HBox([model, layer, head]), example, out], twin)


def head_caption(maps: dict, name: str, layer: int, head: int, i: int) -> tuple[str, dict]:
    """What a view of :func:`head_explorer` shows, in words (its alt text and caption, live
    and in the HTML twin), and the number behind it: how much weight the head's queries put on
    their top key, on average, for input ``i``. ``maps`` maps a model's name to its
    ``(L, N, H, T, T)`` attention maps."""
    row_max = maps[name][layer, i, head].max(dim=-1).values  # (T,) each query's top weight
    return (f"{name}, layer {layer}, head {head}, input {i}: mean top weight "
            f"{float(row_max.mean()):.3f}", {"mean-top": f"{float(row_max.mean()):.4f}"})


def head_twin(maps: dict, labels: Sequence[Sequence[str]], matching: torch.Tensor | None = None,
              model: str | None = None, layer: int = 0, head: int = 0, example: int = 0):
    """The precomputed twin of :func:`head_explorer` for the HTML book: every head of every
    layer of every model (one menu), for every input. ``maps`` maps a model's name to its
    ``(L, N, H, T, T)`` attention maps; ``model`` (None: the first), ``layer``, ``head`` and
    ``example`` are the setting shown first."""
    model = _check_opening(maps, len(labels), model, layer, head, example)
    heads = [(f"{name}, layer {layer}, head {head}", (name, layer, head))
             for name, m in maps.items() for layer in range(m.shape[0])
             for head in range(m.shape[2])]

    def draw(which, i):
        name, layer, head = which
        return plot_head_view(maps[name][:, i], labels[i], layer, head,
                              None if matching is None else matching[i].tolist())

    def caption(which, i):
        return head_caption(maps, *which, i)

    first = [value for _, value in heads].index((model, layer, head))
    controls = [Control("head", heads, first, "dropdown"),
                Control("input", [(str(i), i) for i in range(len(labels))], example)]
    return grid_explorer(controls, draw, caption)
