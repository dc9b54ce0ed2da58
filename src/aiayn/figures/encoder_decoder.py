"""Chapter 6's figures and explorer: gradient norms per layer,
training curves, and every attention map of a trained encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..model import Transformer, TransformerConfig, count_parameters
from .attention import plot_attention
from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_architecture",
    "plot_gradient_norms",
    "plot_training_runs",
    "plot_seed_scores",
    "plot_model_attention",
    "encoder_decoder_explorer",
    "encoder_decoder_twin",
    "TWIN_DATES",
    "encoder_decoder_caption",
]


def plot_architecture(config: TransformerConfig, ax=None):
    """The paper's Figure 1 drawn from ``config``: embeddings and positions, the
    ``N`` x encoder and decoder layers with their sub-layers, the output projection and
    softmax, labelled with ``N``, ``d_model``, ``h``, ``d_ff`` and the parameter counts
    of :func:`~aiayn.model.count_parameters` (per layer and in all), so the figure cannot
    disagree with the code. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    with torch.device("meta"):  # shapes only: the big model costs nothing
        model = Transformer(config)
    n_enc, n_dec = (count_parameters(s.layers[0]) for s in (model.encoder, model.decoder))
    n_embed = count_parameters(model.src_embed)
    c = config
    if ax is None:
        _, ax = plt.subplots(figsize=(8.6, 10.4))
    ax.set(xlim=(0, 10), ylim=(-0.75, 11.7))
    ax.axis("off")
    colors = {"attn": "#fbd9a5", "ffn": "#c7e3f5", "norm": "#f3eea0", "embed": "#f6c6c6",
              "out": "#d9cdf0", "soft": "#cdeccd"}

    def box(x, y, text, kind, w=3.1, h=0.62):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04",
                                    fc=colors[kind], ec="0.3", lw=1))
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5)

    def arrow(points, color="0.25", linestyle="-"):
        (*path, (x1, y1)) = points
        ax.plot([p[0] for p in points[:-1]], [p[1] for p in points[:-1]], color=color, lw=1,
                linestyle=linestyle)
        ax.annotate("", (x1, y1), path[-1], arrowprops=dict(arrowstyle="-|>", color=color, lw=1))

    add = "Add & Norm" if not c.norm_first else "Add (LayerNorm on the sub-layer's input)"
    heads = f"h = {c.n_heads} heads, d_k = {c.d_k}"
    columns = {  # x: (bottom label, [sub-layer, kind] from the bottom up)
        2.6: ("Inputs (source tokens)", [(f"Multi-head self-attention\n{heads}", "attn"),
                                         (add, "norm"), (f"Feed-forward\nd_ff = {c.d_ff}", "ffn"),
                                         (add, "norm")]),
        7.2: ("Outputs (target, shifted right)", [
            (f"Masked multi-head self-attention\n{heads}", "attn"), (add, "norm"),
            (f"Multi-head cross-attention\n{heads}", "attn"), (add, "norm"),
            (f"Feed-forward\nd_ff = {c.d_ff}", "ffn"), (add, "norm")]),
    }
    tops = {}
    for x, (label, subs) in columns.items():
        ax.text(x, 0.05, label, ha="center", fontsize=9)
        box(x, 0.9, f"Embedding × √d_model\n{c.src_vocab:,} × {c.d_model}", "embed")
        ax.text(x, 1.85, "+", ha="center", va="center", fontsize=14,
                bbox=dict(boxstyle="circle,pad=0.1", fc="white", ec="0.3"))
        ax.text(x + 0.35, 1.85, "positional encoding\n(then dropout)", va="center", fontsize=7.5)
        arrow([(x, 0.3), (x, 0.55)])
        arrow([(x, 1.25), (x, 1.65)])
        ys = [3.0 + 1.05 * i for i in range(len(subs))]
        frame_top = ys[-1] + 0.55
        ax.add_patch(FancyBboxPatch((x - 1.95, 2.45), 3.9, frame_top - 2.45,
                                    boxstyle="round,pad=0.05", fc="0.95", ec="0.5", lw=1.2))
        arrow([(x, 2.07), (x, ys[0] - 0.33)])
        for i, ((text, kind), y) in enumerate(zip(subs, ys, strict=True)):
            box(x, y, text, kind)
            if i:
                arrow([(x, ys[i - 1] + 0.33), (x, y - 0.33)])
            if kind == "norm":  # the residual path around the sub-layer below
                y0 = ys[i - 1] - 0.5
                arrow([(x, y0), (x + 1.75, y0), (x + 1.75, y), (x + 1.58, y)], color="#b03a2e")
        n_layer = n_enc if x < 5 else n_dec
        kind_name = "encoder" if x < 5 else "decoder"
        ax.text(x, frame_top + 0.2, f"N = {c.n_layers} × {kind_name} layer: "
                f"{n_layer:,} parameters each", ha="center", fontsize=8.5, weight="bold")
        tops[x] = (frame_top, ys)
    (enc_top, _), (dec_top, dec_ys) = tops[2.6], tops[7.2]
    # memory: the encoder's output feeds every decoder layer's cross-attention
    arrow([(2.6, enc_top + 0.5), (2.6, enc_top + 1.0), (4.85, enc_top + 1.0),
           (4.85, dec_ys[2]), (5.65, dec_ys[2])], color="#1f5f99")
    ax.text(2.6, enc_top + 1.15, "memory (B, S, d_model):\nkeys and values of every\n"
            "decoder layer's cross-attention", ha="center", va="bottom", fontsize=7.5,
            color="#1f5f99")
    tied = " (tied to the embedding)" if c.share_embeddings else ""
    box(7.2, dec_top + 1.05, f"Linear {c.d_model} → {c.tgt_vocab:,}\n{tied.strip(' ()')}", "out")
    box(7.2, dec_top + 1.95, "Softmax", "soft", h=0.5)
    ax.text(7.2, dec_top + 2.6, "Output probabilities", ha="center", fontsize=9)
    arrow([(7.2, dec_top + 0.45), (7.2, dec_top + 0.74)])
    arrow([(7.2, dec_top + 1.36), (7.2, dec_top + 1.7)])
    arrow([(7.2, dec_top + 2.2), (7.2, dec_top + 2.5)])
    ax.text(5, -0.6, f"Dropout (P_drop = {c.dropout:g}) on every sub-layer's output before "
            "its Add, and on the sums of embeddings and positions.\nResidual paths in red.",
            ha="center", fontsize=7.5, color="0.3")
    placement = "Pre-LN" if c.norm_first else "Post-LN, as in the paper"
    ax.set_title(
        f"d_model = {c.d_model}, N = {c.n_layers}, h = {c.n_heads}, d_ff = {c.d_ff}, "
        f"P_drop = {c.dropout:g} ({placement})\n{count_parameters(model):,} parameters: "
        f"embedding {n_embed:,}{' (shared)' if c.share_embeddings else ''}, "
        f"{c.n_layers} × {n_enc:,} + {c.n_layers} × {n_dec:,} in the layers", fontsize=9.5)
    return ax.figure


def plot_gradient_norms(norms: dict, ax: plt.Axes | None = None,
                        title: str | None = None) -> plt.Axes:
    """Gradient norm per layer, ``{label: {"encoder": [..], "decoder": [..]}}`` (from
    :func:`aiayn.experiments.normalization.layer_gradient_norms`): encoder layers 1..N, then decoder
    layers 1..N, on a log scale."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, by_stack in norms.items():
        n_enc, n_dec = len(by_stack["encoder"]), len(by_stack["decoder"])
        values = [*by_stack["encoder"], *by_stack["decoder"]]
        ax.plot(range(1, n_enc + n_dec + 1), values, marker=".", label=label)
    ax.axvline(n_enc + 0.5, color="0.6", lw=0.8)
    ax.set_yscale("log")
    ax.set(xlabel=f"layer (1-{n_enc}: encoder, {n_enc + 1}-{n_enc + n_dec}: decoder)",
           ylabel="gradient norm of the layer")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_training_runs(curves: dict, ylabel: str = "label-smoothed loss", smooth: int = 20,
                       ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Per-step curves ``{label: values}``, each smoothed by a running mean over
    ``smooth`` steps (a run that stopped early simply ends there)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, values in curves.items():
        y = np.asarray(values, dtype=float)
        width = max(1, min(smooth, len(y)))
        mean = np.convolve(y, np.ones(width) / width, mode="valid")
        ax.plot(np.arange(width, len(y) + 1), mean, label=label)
    ax.set(xlabel="step", ylabel=ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_seed_scores(scores: dict, xlabel: str = "exact match", ax: plt.Axes | None = None,
                     title: str | None = None) -> plt.Axes:
    """One row per setting ``{label: [score of each seed]}``: a dot per seed and a bar at
    their mean. Trained scores move with the seed and with the processor's rounding, so the
    page shows each seed's score here, where the spread is visible, rather than digits in
    the text."""
    if not scores or any(len(v) == 0 for v in scores.values()):
        raise ValueError("scores must map each label to at least one score")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 0.45 * len(scores) + 1.2))
    for row, values in enumerate(scores.values()):
        x = np.asarray(values, dtype=float)
        ax.plot(x, np.full_like(x, row), "o", color="C0", alpha=0.8,
                label="one seed" if row == 0 else None)
        ax.plot([x.mean()] * 2, [row - 0.3, row + 0.3], color="C3", lw=2, linestyle="-",
                label="mean of the seeds" if row == 0 else None)
    ax.set_yticks(range(len(scores)), list(scores))
    ax.invert_yaxis()  # the first setting on top
    ax.set(xlabel=xlabel, xlim=(-0.02, 1.02))
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def plot_model_attention(maps: dict, kind: str, layer: int, head: int | None,
                         source: Sequence[str], target: Sequence[str],
                         ax: plt.Axes | None = None) -> plt.Axes:
    """One map of :func:`aiayn.inspection.attention_maps` (first example of the batch):
    ``kind`` (encoder self, decoder self, cross), ``layer`` from 0, ``head`` from 0 or
    None for the mean over heads. ``source`` and ``target`` label the encoder's and the
    decoder's positions."""
    if kind not in maps:
        raise ValueError(f"kind must be one of {list(maps)}, got {kind!r}")
    n_layers, n_heads = len(maps[kind]), maps[kind][0].shape[1]
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {layer}")
    if head is not None and not 0 <= head < n_heads:
        raise ValueError(f"head must be None or in [0, {n_heads - 1}], got {head}")
    weights = maps[kind][layer][0]  # (H, queries, keys)
    weights = weights.mean(dim=0) if head is None else weights[head]
    rows = list(source) if kind == "encoder self" else list(target)
    cols = list(target) if kind == "decoder self" else list(source)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 0.3 * len(cols) + 2.5),
                                      max(3.0, 0.3 * len(rows) + 1.5)))
    which = "mean of the heads" if head is None else f"head {head + 1}"
    show = [c if c != " " else "␣" for c in cols]
    plot_attention(weights, [r if r != " " else "␣" for r in rows], show, ax=ax,
                   annotate=False, title=f"{kind}, layer {layer + 1}, {which}")
    return ax


def encoder_decoder_explorer(model, tokenizer, text: str = "Nov 29, 2026",
                             twin: bool = True):
    """Chapter 6: every attention map of a trained date model. Type a date; pick the kind
    of attention (encoder self, decoder self, cross), the layer and the head (or their
    mean). The decoder reads the model's own greedy answer; input the model cannot read
    gets a message instead of a map."""
    import ipywidgets as w

    from ..inspection import ATTENTION_KINDS, attention_maps
    from ..learning.decode import translate

    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    box = w.Text(style={"description_width": "initial"}, value=text, description="date", continuous_update=False)
    kind = w.Dropdown(style={"description_width": "initial"}, options=list(ATTENTION_KINDS), value="cross", description="attention")
    layer = w.Dropdown(style={"description_width": "initial"}, options=[(str(i + 1), i) for i in range(n_layers)], value=n_layers - 1,
                       description="layer")
    head = w.Dropdown(style={"description_width": "initial"}, options=[("mean", None)] + [(str(i + 1), i) for i in range(n_heads)],
                      value=None, description="head")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            result = translate(model, tokenizer, box.value)
            if result["error"]:
                print(f"Cannot read this input: {result['error']}")
                return
            device = next(model.parameters()).device
            src = torch.tensor([tokenizer.encode(box.value)], device=device)
            answer = tokenizer.encode(result["output"], bos=True, eos=False)
            maps = attention_maps(model, src, torch.tensor([answer], device=device))
            target = ["<bos>", *result["output"]]  # what the decoder reads
            setting = (kind.value, layer.value, head.value)
            ax = plot_model_attention(maps, *setting, result["source"], target)
            show_view(ax.figure, encoder_decoder_caption(box.value, result, *setting)[0])

    for control in (box, kind, layer, head):
        control.observe(redraw, names="value")
    redraw()
    twin = (encoder_decoder_twin(model, tokenizer, (text, *TWIN_DATES))
            if twin and can_build_twin() else None)
    return explorer_box([w.HBox([box, kind]), w.HBox([layer, head]), out], twin)


#: Inputs the HTML book offers instead of a text box, after the chapter's own (another form
#: of date, and text that is no date).
TWIN_DATES = ("2049.12.31", "hello")


def encoder_decoder_caption(text: str, result: dict, kind: str, layer: int,
                            head: int | None) -> tuple[str, dict]:
    """What a view of :func:`encoder_decoder_explorer` shows, in words (its alt text and
    caption, live and in the HTML twin): which map (``kind`` of attention, 0-based ``layer``,
    0-based ``head`` or None for the mean), and the model's answer, ``result`` being
    :func:`aiayn.learning.decode.translate`'s for ``text``."""
    if result["error"]:
        return f"{text!r}: {result['error']}", {"output": ""}
    which = "mean of the heads" if head is None else f"head {head + 1}"
    return (f"{kind} attention, layer {layer + 1}, {which}: {text!r} -> {result['output']!r}",
            {"output": result["output"]})


def encoder_decoder_twin(model, tokenizer, texts: Sequence[str]):
    """The precomputed twin of :func:`encoder_decoder_explorer` for the HTML book: a fixed
    list of ``texts`` (duplicates dropped), every kind of attention, layer and head (and the
    mean over heads). An input the model cannot read shows the reason instead of a map."""
    import matplotlib.pyplot as plt

    from ..inspection import ATTENTION_KINDS, attention_maps
    from ..learning.decode import translate

    texts = list(dict.fromkeys(texts))
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    device = next(model.parameters()).device
    runs = {}
    for text in texts:  # one translation and one set of maps per input
        result = translate(model, tokenizer, text)
        maps = None
        if not result["error"]:
            src = torch.tensor([tokenizer.encode(text)], device=device)
            answer = tokenizer.encode(result["output"], bos=True, eos=False)
            maps = attention_maps(model, src, torch.tensor([answer], device=device))
        runs[text] = (result, maps)

    def draw(text, kind, layer, head):
        result, maps = runs[text]
        if maps is None:
            fig, ax = plt.subplots(figsize=(6, 1.2))
            ax.axis("off")
            ax.text(0, 0.5, f"Cannot read {text!r}: {result['error']}", va="center")
            return fig
        ax = plot_model_attention(maps, kind, layer, head, result["source"],
                                  ["<bos>", *result["output"]])
        return ax.figure

    def caption(text, kind, layer, head):
        return encoder_decoder_caption(text, runs[text][0], kind, layer, head)

    controls = [
        Control("date", [(t, t) for t in texts], 0, "dropdown"),
        Control("attention", [(k, k) for k in ATTENTION_KINDS], ATTENTION_KINDS.index("cross"),
                "dropdown"),
        Control("layer", [(str(i + 1), i) for i in range(n_layers)], n_layers - 1, "dropdown"),
        Control("head", [("mean", None)] + [(str(i + 1), i) for i in range(n_heads)], 0,
                "dropdown"),
    ]
    return grid_explorer(controls, draw, caption)
