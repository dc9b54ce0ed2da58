"""Figures and explorer of the trained model's heads (:mod:`aiayn.experiments.trained_heads`):
a per-head quantity as a layers x heads heatmap, the position similarity of the learned and
the sinusoidal tables side by side, and an explorer of every head's attention map on a
sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..experiments.trained_heads import PositionSimilarity
from ..pretrained import BertEncoder, trace_sentences
from .style import _as_2d
from .views import Control, can_build_twin, check_index, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_head_heatmap",
    "plot_position_similarity",
    "top_targets",
    "plot_trained_attention",
    "trained_attention_explorer",
    "trained_attention_twin",
    "trained_caption",
]


def plot_head_heatmap(values, ax: plt.Axes | None = None, title: str | None = None,
                      label: str = "value", cmap: str = "Blues", vmin: float | None = None,
                      vmax: float | None = None, annotate: bool = True) -> plt.Axes:
    """Heatmap of a per-head quantity ``values`` ``(L, H)``: one row per layer, one column per
    head (both counted from 0, as in :mod:`aiayn.experiments.trained_heads`)."""
    v = _as_2d(values)
    n_layers, n_heads = v.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 + 0.5 * n_heads, 1.0 + 0.45 * n_layers))
    image = ax.imshow(v, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if annotate:
        low, high = image.get_clim()
        for (i, j), value in np.ndenumerate(v):
            dark = high > low and (value - low) / (high - low) > 0.6
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label)
    return ax


def plot_position_similarity(similarity: PositionSimilarity, fig: plt.Figure | None = None
                             ) -> plt.Figure:
    """The cosine similarity of positions, learned (left) and sinusoidal (right), on one
    colour scale, each titled with its mean similarity at the summary's offsets."""
    if not isinstance(similarity, PositionSimilarity):
        raise TypeError(f"similarity must be a PositionSimilarity, got {type(similarity).__name__}")
    if fig is None:
        fig = plt.figure(figsize=(10, 4.4))
    axes = fig.subplots(1, 2)
    for ax, name in zip(axes, ("learned", "sinusoidal"), strict=True):
        image = ax.imshow(_as_2d(getattr(similarity, name)), cmap="RdBu_r", vmin=-1, vmax=1)
        at = ", ".join(f"{k}: {v:.2f}" for k, v in similarity.summary[name].items())
        ax.set_title(f"{name} positions\nmean similarity at offset {at}", fontsize=9)
        ax.set_xlabel("position")
        ax.set_ylabel("position")
    fig.colorbar(image, ax=list(axes), fraction=0.046, pad=0.04, label="cosine similarity")
    return fig


def top_targets(weights) -> list[int]:
    """For each query row of ``weights`` ``(T, T)``, the key it puts the most weight on."""
    return [int(j) for j in _as_2d(weights).argmax(axis=1)]


def plot_trained_attention(tokens: Sequence[str], weights, layer: int, head: int,
                           ax: plt.Axes | None = None) -> plt.Axes:
    """One head's map on one sentence ``(T, T)``, row = query: each row's top target is
    ringed and named in the row's label ("query -> target")."""
    w = _as_2d(weights)
    if w.shape != (len(tokens), len(tokens)):
        raise ValueError(f"got {len(tokens)} tokens for weights of shape {w.shape}")
    n = len(tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(2.6 + 0.32 * n, 1.2 + 0.3 * n))
    image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    top = top_targets(w)
    ax.scatter(top, range(n), s=60, facecolors="none", edgecolors="tab:orange", linewidths=1.5)
    ax.set_xticks(range(n), list(tokens), rotation=90, fontsize=8)
    ax.set_yticks(range(n), [f"{t} \u2192 {tokens[j]}" for t, j in zip(tokens, top, strict=True)], fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query \u2192 its top target")
    ax.set_title(f"layer {layer}, head {head}")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def _sentence_maps(model: BertEncoder, tokenizer: Any, sentence: str
                   ) -> tuple[list[str], torch.Tensor]:
    """``(tokens, maps)``: one sentence's word pieces and its maps ``(L, H, T, T)`` on the CPU."""
    trace = trace_sentences(model, tokenizer, [sentence])
    return trace.tokens[0], torch.stack([a[0] for a in trace.attentions]).float().cpu()


def _draw(tokens: Sequence[str], maps: torch.Tensor, layer: int, head: int) -> plt.Figure:
    ax = plot_trained_attention(tokens, maps[layer, head], layer, head)
    return ax.figure


def trained_attention_explorer(model: BertEncoder, tokenizer: Any, sentences: Sequence[str],
                               twin: bool = True, layer: int = 0, head: int = 0,
                               twin_layers: Sequence[int] | None = None,
                               twin_heads: Sequence[int] | None = None):
    """Type a sentence (or start from one of ``sentences``), pick a layer and a head: see that
    head's attention map and each token's top target (:func:`plot_trained_attention`).

    The explorer opens on ``sentences[0]`` at ``layer`` and ``head``. ``twin``
    (ipywidgets 8): also build the precomputed twin the HTML book shows
    (:func:`trained_attention_twin`: the fixed ``sentences``, the layers ``twin_layers`` and
    heads ``twin_heads``, default all, opening on the same setting).
    Returns the widget box (display it as the last expression of a cell)."""
    import ipywidgets as w

    sentences = _check_sentences(sentences)
    config = model.config
    check_index("layer", layer, config.n_layers)
    check_index("head", head, config.n_heads)
    start_layer, start_head = layer, head
    text = w.Text(style={"description_width": "initial"}, value=sentences[0], description="sentence", continuous_update=False,
                  layout=w.Layout(width="95%"))
    layer = w.IntSlider(style={"description_width": "initial"}, value=start_layer, min=0, max=config.n_layers - 1, description="layer")
    head = w.IntSlider(style={"description_width": "initial"}, value=start_head, min=0, max=config.n_heads - 1, description="head")
    out = w.Output()
    cache: dict[str, tuple[list[str], torch.Tensor]] = {}

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            try:
                if text.value not in cache:
                    cache.clear()  # one sentence at a time: the maps of a long one are large
                    cache[text.value] = _sentence_maps(model, tokenizer, text.value)
            except (TypeError, ValueError) as error:  # an empty or over-long sentence
                print(f"cannot trace this sentence: {error}")
                return
            fig = _draw(*cache[text.value], layer.value, head.value)
            show_view(fig, trained_caption(*cache[text.value], layer.value, head.value)[0])

    for control in (text, layer, head):
        control.observe(redraw, names="value")
    redraw()
    # positional arguments: the unit tests stand in for the twin with ``lambda *args``
    built = trained_attention_twin(model, tokenizer, sentences, twin_layers, twin_heads,
                                   start_layer, start_head) if twin and can_build_twin() else None
    return explorer_box([text, w.HBox([layer, head]), out], built)


def _check_sentences(sentences: Sequence[str]) -> list[str]:
    if isinstance(sentences, str) or not sentences \
            or not all(isinstance(s, str) and s.strip() for s in sentences):
        raise ValueError(f"sentences must be a non-empty list of non-empty strings, got {sentences!r}")
    return list(sentences)


def trained_caption(tokens: Sequence[str], maps: torch.Tensor, layer: int,
                    head: int) -> tuple[str, dict]:
    """What a view of :func:`trained_attention_explorer` shows, in words (its alt text and
    caption, live and in the HTML twin), and the numbers behind it: each token's top target
    under the head. ``maps`` holds a sentence's attention maps, ``(L, H, T, T)``."""
    top = top_targets(maps[layer, head])
    pairs = ", ".join(f"{t}\u2192{tokens[j]}" for t, j in zip(tokens, top, strict=True))
    return (f"layer {layer}, head {head}: {pairs}",
            {"top": ",".join(map(str, top)), "layer": layer, "head": head})


def trained_attention_twin(model: BertEncoder, tokenizer: Any, sentences: Sequence[str],
                           layers: Sequence[int] | None = None,
                           heads: Sequence[int] | None = None,
                           layer: int | None = None, head: int | None = None):
    """The precomputed twin of :func:`trained_attention_explorer` for the HTML book: each of
    ``sentences`` and each of ``layers`` and ``heads`` (default: all), one view per
    combination, opening on the first sentence at ``layer`` and ``head`` (default: the
    first of ``layers`` and ``heads``). A view's caption names each token's top target; its
    data holds them."""
    sentences = _check_sentences(sentences)
    config = model.config
    layers = list(range(config.n_layers)) if layers is None else list(layers)
    heads = list(range(config.n_heads)) if heads is None else list(heads)
    for name, values, n in (("layers", layers, config.n_layers), ("heads", heads, config.n_heads)):
        if not values:
            raise ValueError(f"{name} must not be empty")
        for value in values:
            check_index(name, value, n)
    start = []
    for name, value, values in (("layer", layer, layers), ("head", head, heads)):
        if value is not None and value not in values:
            raise ValueError(f"{name} must be one of {values}, got {value!r}")
        start.append(0 if value is None else values.index(value))
    traced = [_sentence_maps(model, tokenizer, s) for s in sentences]

    def caption(s, layer, head):
        return trained_caption(*traced[s], layer, head)

    # Both ends of a long sentence: minimal pairs differ only at the end.
    short = [s if len(s) <= 40 else s[:18] + "..." + s[-19:] for s in sentences]
    controls = [
        Control("sentence", [(label, i) for i, label in enumerate(short)], 0, "dropdown"),
        Control("layer", [(str(i), i) for i in layers], start[0]),
        Control("head", [(str(i), i) for i in heads], start[1]),
    ]
    return grid_explorer(controls, lambda s, layer, head: _draw(*traced[s], layer, head), caption)
