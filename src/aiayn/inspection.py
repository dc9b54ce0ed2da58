"""Looking inside a model: every attention map of one pass, and the same weights in
``torch.nn.Transformer`` so the whole model can be checked against PyTorch's own.
"""

from __future__ import annotations

import re
import warnings

import torch
from torch import nn

__all__ = [
    "attention_maps",
    "ATTENTION_KINDS",
    "to_torch_names",
    "torch_transformer",
    "torch_reference_logits",
]


#: The three kinds of attention in the model, as named by :func:`attention_maps`.
ATTENTION_KINDS = ("encoder self", "decoder self", "cross")


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
