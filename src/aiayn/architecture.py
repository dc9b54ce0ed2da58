"""Chapter 6: the encoder-decoder's parts, measured.

LayerNorm written out and set against BatchNorm (padding, other sequences of the batch),
gradient norms per layer (Post-LN, Pre-LN, and stacks without LayerNorm or without
residuals), warm-up runs at any peak rate, every attention map of a model, the bridge to
``torch.nn.Transformer`` that checks the whole model against PyTorch's own, and the
paper's Figure 1 drawn from a config.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import torch
from torch import nn

from .layers import DecoderLayer, EncoderLayer
from .model import Transformer, TransformerConfig, count_parameters

__all__ = [
    "layer_norm",
    "normalize",
    "padding_effect",
    "layer_gradient_norms",
    "attention_maps",
    "ATTENTION_KINDS",
    "to_torch_names",
    "torch_transformer",
    "torch_reference_logits",
    "cross_sample_effect",
    "masked_batch_norm",
    "VARIANTS",
    "stack_variant",
    "token_spread",
    "decoder_gradient_flow",
    "train_warmup_run",
    "plot_architecture",
]

#: The three kinds of attention in the model, as named by :func:`attention_maps`.
ATTENTION_KINDS = ("encoder self", "decoder self", "cross")


def layer_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm without its learned scale and shift: each token ``(.., d_model)`` minus
    its own mean, divided by its own standard deviation (biased variance, as
    ``torch.nn.LayerNorm``). Nothing is shared between tokens."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor (.., d_model)")
    mean = x.mean(dim=-1, keepdim=True)  # (.., 1): one mean per token
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # (.., 1): one variance per token
    return (x - mean) / torch.sqrt(var + eps)


def normalize(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Apply ``norm`` to ``x`` ``(B, T, d)``: a LayerNorm as it is, a BatchNorm1d over
    every position of the batch (torch wants the features in dimension 1)."""
    if isinstance(norm, nn.BatchNorm1d):
        return norm(x.transpose(1, 2)).transpose(1, 2)  # statistics over B * T positions
    if isinstance(norm, nn.LayerNorm):
        return norm(x)  # statistics over d, per position
    raise TypeError(f"norm must be nn.LayerNorm or nn.BatchNorm1d, got {type(norm).__name__}")


def padding_effect(norm: nn.Module, x: torch.Tensor, n_pad: int, pad_value: float = 0.0) -> float:
    """Largest change of the real tokens' outputs when ``n_pad`` padding positions
    (vectors of ``pad_value``) are appended to every sequence of ``x`` ``(B, T, d)``.

    ``norm`` is used in training mode, where BatchNorm computes its statistics from the
    batch it is given; its running statistics are restored afterwards."""
    if not isinstance(n_pad, int) or isinstance(n_pad, bool) or n_pad < 0:
        raise ValueError(f"n_pad must be a non-negative int, got {n_pad!r}")
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, length, d), got shape {tuple(x.shape)}")
    saved = {k: v.clone() for k, v in norm.state_dict().items()}
    was_training = norm.training
    norm.train()
    with torch.no_grad():
        alone = normalize(norm, x)
        pads = torch.full((x.shape[0], n_pad, x.shape[2]), pad_value, dtype=x.dtype)
        padded = normalize(norm, torch.cat([x, pads.to(x.device)], dim=1))[:, : x.shape[1]]
    norm.load_state_dict(saved)
    norm.train(was_training)
    return (padded - alone).abs().max().item()


def layer_gradient_norms(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, epsilon: float = 0.1
) -> dict[str, list[float]]:
    """Gradient norm of each encoder and decoder layer's parameters for one teacher-forced
    batch (``tgt`` = ``<bos>`` .. ``<eos>``) under the label-smoothed loss.

    Returns ``{"encoder": [layer 1, ..], "decoder": [layer 1, ..]}``; the model's
    gradients are cleared before and after."""
    from .train import teacher_forcing_step

    model.zero_grad(set_to_none=True)
    loss, _, _ = teacher_forcing_step(model, src, tgt, epsilon, model.config.pad_id)
    loss.backward()
    norms = {}
    for stack in ("encoder", "decoder"):
        norms[stack] = [
            torch.sqrt(sum(p.grad.square().sum() for p in layer.parameters()
                           if p.grad is not None)).item()
            for layer in getattr(model, stack).layers
        ]
    model.zero_grad(set_to_none=True)
    return norms


@torch.no_grad()
def attention_maps(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, kinds: tuple[str, ...] = ATTENTION_KINDS
) -> dict:
    """Attention weights of one teacher-forced pass of ``model(src, tgt)``, for each of
    ``kinds`` (a subset of :data:`ATTENTION_KINDS`; the others cost nothing).

    Returns a dict keyed by ``kinds``; each value is a list with one tensor per layer:
    ``(B, H, S, S)`` for the encoder's self-attention, ``(B, H, T, T)`` for the
    decoder's (causal), ``(B, H, T, S)`` for cross-attention."""
    unknown = set(kinds) - set(ATTENTION_KINDS)
    if unknown:
        raise ValueError(f"kinds must be among {ATTENTION_KINDS}, got {sorted(unknown)}")
    modules = {
        "encoder self": [layer.self_attn for layer in model.encoder.layers],
        "decoder self": [layer.self_attn for layer in model.decoder.layers],
        "cross": [layer.cross_attn for layer in model.decoder.layers],
    }
    maps: dict[str, list[torch.Tensor]] = {kind: [] for kind in kinds}

    def recorder(kind):
        def record(module, args, output):
            _, weights = module.forward(*args, need_weights=True)  # no hooks, no recursion
            maps[kind].append(weights)

        return record

    handles = [attn.register_forward_hook(recorder(kind))
               for kind in kinds for attn in modules[kind]]
    was_training = model.training
    try:
        model.eval()
        model(src, tgt)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return maps


_QKV = re.compile(r"^(?P<prefix>.*?)w_(?P<which>[qkv])\.(?P<kind>weight|bias)$")


def to_torch_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our parameter names -> ``torch.nn``'s, for a state dict or a dict of gradients.

    ``w_q, w_k, w_v`` become ``in_proj_weight`` / ``in_proj_bias`` (stacked in q, k, v
    order), ``w_o`` becomes ``out_proj``, ``cross_attn`` ``multihead_attn`` and
    ``feed_forward.linear1/2`` ``linear1/2``; norms and layer indices keep their names."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        name = (name.replace("feed_forward.", "").replace("cross_attn.", "multihead_attn.")
                .replace("w_o.", "out_proj."))
        match = _QKV.match(name)
        if match:
            qkv.setdefault((match["prefix"], match["kind"]), {})[match["which"]] = tensor
        else:
            out[name] = tensor
    for (prefix, kind), parts in qkv.items():
        out[f"{prefix}in_proj_{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]])
    return out


def torch_transformer(model: nn.Module) -> nn.Transformer:
    """A ``torch.nn.Transformer`` holding copies of ``model``'s encoder and decoder weights.

    ``model`` is anything with aiayn ``.encoder`` and ``.decoder`` stacks (a
    :class:`~aiayn.model.Transformer`). torch always appends a LayerNorm to both stacks:
    for Post-LN, whose layers already end in one, those two become ``nn.Identity``; for
    Pre-LN they receive the stacks' final norms. Dropout is 0: the two are compared in
    either mode."""
    first = model.encoder.layers[0]
    d_model, n_heads = first.self_attn.d_model, first.self_attn.n_heads
    with warnings.catch_warnings():  # torch notes that Pre-LN disables its nested tensors
        warnings.simplefilter("ignore", UserWarning)
        theirs = nn.Transformer(
            d_model, n_heads, len(model.encoder.layers), len(model.decoder.layers),
            first.feed_forward.linear1.out_features, dropout=0.0, batch_first=True,
            norm_first=first.norm_first,
        )
    if not first.norm_first:
        theirs.encoder.norm, theirs.decoder.norm = nn.Identity(), nn.Identity()
    state = {}
    for stack in ("encoder", "decoder"):
        for name, tensor in getattr(model, stack).state_dict().items():
            state[f"{stack}.{name}"] = tensor.detach().clone()
    theirs.load_state_dict(to_torch_names(state), strict=True)
    dtype = next(model.parameters()).dtype
    return theirs.to(dtype=dtype, device=next(model.parameters()).device)


def torch_reference_logits(
    model: nn.Module, theirs: nn.Transformer, src: torch.Tensor, tgt: torch.Tensor
) -> torch.Tensor:
    """``model``'s logits with its encoder and decoder replaced by ``theirs`` (from
    :func:`torch_transformer`): our embeddings, positions and output projection around
    PyTorch's stacks, with PyTorch's own masks (causal and key-padding).

    Rows of padding in ``tgt`` are not comparable: torch and aiayn treat them
    differently and both are ignored by the loss."""
    pad = model.config.pad_id
    src_x = model._embed(model.src_embed, src)  # (B, S, d_model)
    tgt_x = model._embed(model.tgt_embed, tgt)  # (B, T, d_model)
    n = tgt.shape[1]
    # torch's boolean masks mean True = ignore (ours: True = may attend)
    causal = torch.ones(n, n, dtype=torch.bool, device=tgt.device).triu(1)  # the future
    src_pad, tgt_pad = src == pad, tgt == pad
    with warnings.catch_warnings():  # torch's note that its nested tensors are a prototype
        warnings.simplefilter("ignore", UserWarning)
        hidden = theirs(
            src_x, tgt_x, tgt_mask=causal, src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True,
        )
    return model.generator(hidden)


# ------------------------------------------------ normalisation across the batch (003 §7.1)


def cross_sample_effect(norm, x: torch.Tensor, others: torch.Tensor) -> float:
    """Largest change of the first sequence's outputs when the rest of the batch ``x``
    ``(B, T, d)`` is replaced by ``others`` ``(B - 1, T, d)``.

    ``norm`` is an ``nn.LayerNorm`` or ``nn.BatchNorm1d`` (used in training mode, its
    state restored afterwards) or any function ``(B, T, d) -> (B, T, d)``."""
    if x.dim() != 3 or others.shape != (x.shape[0] - 1, *x.shape[1:]):
        raise ValueError(f"others must be (B - 1, T, d) for x {tuple(x.shape)}, "
                         f"got {tuple(others.shape)}")
    apply = norm
    if isinstance(norm, nn.Module):
        saved, was_training = {k: v.clone() for k, v in norm.state_dict().items()}, norm.training
        norm.train()

        def apply(batch):
            return normalize(norm, batch)
    with torch.no_grad():
        first = apply(x)[0]
        first_other = apply(torch.cat([x[:1], others]))[0]
    if isinstance(norm, nn.Module):
        norm.load_state_dict(saved)
        norm.train(was_training)
    return (first - first_other).abs().max().item()


def masked_batch_norm(x: torch.Tensor, keep: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm's statistics over the real tokens only: each feature of ``x`` ``(B, T, d)``
    minus its mean over the positions where ``keep`` ``(B, T)`` is True, divided by their
    standard deviation. Padding no longer moves the real tokens; the other sequences
    of the batch still do."""
    if keep.shape != x.shape[:2] or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a bool tensor of shape {tuple(x.shape[:2])}, "
                         f"got {keep.dtype} {tuple(keep.shape)}")
    real = x[keep]  # (n_real, d): every real token of the batch
    mean, var = real.mean(dim=0), real.var(dim=0, unbiased=False)  # (d,) per feature
    return (x - mean) / torch.sqrt(var + eps)


# --------------------------------------------- residuals and LayerNorm, ablated (003, 004)

#: The four stacks compared at initialisation by :func:`stack_variant`.
VARIANTS = ("Post-LN", "Pre-LN", "no LayerNorm", "no residual")


class _NoResidualEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(self._self_attention(x, mask))  # LN(Sublayer(x)): no "x +"
        return self.norm2(self._feed_forward(x))


class _NoResidualDecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(self._self_attention(x, tgt_mask))
        x = self.norm2(self._cross_attention(x, memory, memory_mask))
        return self.norm3(self._feed_forward(x))


def stack_variant(config: TransformerConfig, variant: str, seed: int = 0) -> Transformer:
    """A freshly initialised ``Transformer(config)`` (seeded) whose layers are one of
    :data:`VARIANTS`: ``"Post-LN"`` ``LN(x + F(x))``, ``"Pre-LN"`` ``x + F(LN(x))``,
    ``"no LayerNorm"`` ``x + F(x)`` and ``"no residual"`` ``LN(F(x))``. The same
    weights in all four, for a given seed and config."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    torch.manual_seed(seed)
    model = Transformer(replace(config, norm_first=variant == "Pre-LN"))
    for stack, plain in ((model.encoder, _NoResidualEncoderLayer),
                         (model.decoder, _NoResidualDecoderLayer)):
        for layer in stack.layers:
            if variant == "no LayerNorm":
                for name in ("norm1", "norm2", "norm3"):
                    if hasattr(layer, name):
                        setattr(layer, name, nn.Identity())
            elif variant == "no residual":
                layer.__class__ = plain  # same parameters, forward without the "x +"
    return model


def token_spread(x: torch.Tensor, keep: torch.Tensor) -> float:
    """How distinct the tokens of each sequence are: 1 minus the mean cosine similarity
    of every pair of real tokens (``keep`` ``(B, T)``) of ``x`` ``(B, T, d)``, averaged
    over the sequences. 0 means every token of a sequence points the same way."""
    if keep.shape != x.shape[:2]:
        raise ValueError(f"keep must have shape {tuple(x.shape[:2])}, got {tuple(keep.shape)}")
    unit = nn.functional.normalize(x.double(), dim=-1)
    spreads = []
    for u, k in zip(unit, keep, strict=True):
        u = u[k]  # (n, d): the real tokens
        n = u.shape[0]
        if n > 1:
            cos = u @ u.T  # (n, n)
            spreads.append(1 - (cos.sum() - cos.diagonal().sum()).item() / (n * (n - 1)))
    return sum(spreads) / len(spreads)


def decoder_gradient_flow(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                          epsilon: float = 0.1) -> dict[str, list[float]]:
    """Where the decoder's gradient shrinks, for one teacher-forced batch.

    Returns ``"layer_input"``: the gradient norm at the input of each decoder layer
    (layer 1 first); ``"norm_gain"``: for each LayerNorm of the decoder's layers, in
    forward order, the gradient norm at its input divided by that at its output;
    ``"inv_scale"``: for the same LayerNorms, 1 / (standard deviation of the sum it
    normalises), averaged over positions. Gradients are cleared afterwards."""
    from .train import teacher_forcing_step

    layer_inputs, norm_io, handles = [], [], []

    def keep_input(module, args, output):
        args[0].retain_grad()
        layer_inputs.append(args[0])

    def keep_both(module, args, output):
        args[0].retain_grad()
        output.retain_grad()
        norm_io.append((args[0], output))

    for layer in model.decoder.layers:
        handles.append(layer.register_forward_hook(keep_input))
        handles += [m.register_forward_hook(keep_both)
                    for m in layer.modules() if isinstance(m, nn.LayerNorm)]
    model.zero_grad(set_to_none=True)
    try:
        loss, _, _ = teacher_forcing_step(model, src, tgt, epsilon, model.config.pad_id)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    model.zero_grad(set_to_none=True)
    return {
        "layer_input": [x.grad.norm().item() for x in layer_inputs],
        "norm_gain": [x.grad.norm().item() / y.grad.norm().item() for x, y in norm_io],
        "inv_scale": [(1 / x.detach().std(dim=-1, unbiased=False)).mean().item()
                      for x, _ in norm_io],
    }


# ------------------------------------------------------------- warm-up at any peak rate


def train_warmup_run(
    config: TransformerConfig, tokenizer, n_steps: int, warmup: int = 300, ramp: bool = True,
    batch: int = 64, seed: int = 0, factor: float = 1.0, device=None,
) -> tuple[Transformer, dict[str, list[float]]]:
    """:func:`aiayn.recipes.train_date_model` with the schedule's ``factor`` (Eq. 3):
    the peak rate is ``factor * (d_model * warmup) ** -0.5``; ``ramp=False`` starts at
    it (:func:`aiayn.recipes.no_ramp_lr`). Only the ``n_steps * batch`` training pairs
    used are generated: with ``factor = 1`` the run is ``train_date_model``'s, batch for
    batch. A run whose loss becomes NaN stops there (``history["diverged"]``)."""
    from .recipes import date_batch_fn, no_ramp_lr
    from .train import Seq2SeqTrainer

    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    torch.manual_seed(seed)
    model = Transformer(config).to(device or "cpu")
    trainer = Seq2SeqTrainer(model, warmup=warmup, factor=factor)
    if not ramp:
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
            trainer.optimizer, lambda s: no_ramp_lr(s + 1, config.d_model, warmup, factor))
    batch_fn = date_batch_fn(tokenizer, batch, n_pairs=n_steps * batch, seed=seed, device=device)
    try:
        trainer.train(batch_fn, n_steps)
    except FloatingPointError:
        trainer.history["diverged"] = [trainer.step]
        model.eval()
    return model, trainer.history


# ------------------------------------------------------------- Figure 1, from the config


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

    def arrow(points, color="0.25"):
        (*path, (x1, y1)) = points
        ax.plot([p[0] for p in points[:-1]], [p[1] for p in points[:-1]], color=color, lw=1)
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
