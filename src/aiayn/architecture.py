"""Chapter 6: the encoder-decoder's parts, measured.

LayerNorm written out and set against BatchNorm when padding is added, gradient norms
per layer (Post-LN against Pre-LN), every attention map of a model, and the bridge to
``torch.nn.Transformer`` that checks the whole model against PyTorch's own.
"""

from __future__ import annotations

import re
import warnings

import torch
from torch import nn

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
