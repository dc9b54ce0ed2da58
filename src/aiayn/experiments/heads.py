"""Multi-head attention, taken apart (Section 3.2.2 of the paper).

* :func:`multi_head_attention_loop` computes ``Concat(head_1, ..., head_h) W^O`` one head at a
  time from per-head slices of an :class:`~aiayn.attention.MultiHeadAttention`'s weights: the paper's
  formula read literally, to check the batched module against.
* :func:`to_torch_multihead_attention` copies those weights into ``torch.nn.MultiheadAttention``.
* :func:`attention_cost` and :func:`count_matmul_flops`: parameters and FLOPs, by formula and
  by counting what PyTorch really runs.
* :class:`TinyEncoder` and the head measures (:func:`attention_entropy`,
  :func:`offset_profile`, :func:`mass_on_positions`, :func:`head_summary`) for the experiment
  in which heads specialise.

Shapes: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..layers import EncoderLayer
from ..positional import PositionalEncoding
from ..utils import check_tensor, check_tokens

__all__ = [
    "multi_head_attention_loop",
    "to_torch_multihead_attention",
    "permute_heads",
    "AttentionCost",
    "attention_cost",
    "count_matmul_flops",
    "TinyEncoder",
    "attention_entropy",
    "offset_profile",
    "mass_on_positions",
    "head_summary",
]


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


# --------------------------------------------------------------------- three implementations


def multi_head_attention_loop(
    mha: MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    A Python loop over the heads: head ``i`` owns rows ``i*d_k .. (i+1)*d_k`` of the
    ``nn.Linear`` weights ``w_q, w_k, w_v`` (an ``nn.Linear`` stores ``W^T``, shape
    ``(out, in)``) and the same columns of ``w_o``. Slow and literal, to check the batched
    module against. ``mask`` is boolean (True = may attend), broadcastable to ``(B, T, S)``.

    Returns ``(output, weights)``: ``(B, T, d_model)`` and ``(B, H, T, S)``.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an aiayn.MultiHeadAttention, got {type(mha).__name__}")
    mha._check_inputs(query, key, value)
    d_k = mha.d_k
    heads, weights = [], []
    for i in range(mha.n_heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        q_i, k_i, v_i = (
            _project(x, lin.weight[rows], None if lin.bias is None else lin.bias[rows])
            for x, lin in ((query, mha.w_q), (key, mha.w_k), (value, mha.w_v))
        )  # each (B, L, d_k)
        head, w = scaled_dot_product_attention(q_i, k_i, v_i, mask)  # (B, T, d_k), (B, T, S)
        heads.append(head)
        weights.append(w)
    concat = torch.cat(heads, dim=-1)  # h x (B, T, d_k) -> (B, T, h * d_k) = (B, T, d_model)
    output = _project(concat, mha.w_o.weight, mha.w_o.bias)
    return output, torch.stack(weights, dim=1)  # h x (B, T, S) -> (B, H, T, S)


def _project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = x @ weight.T  # (B, L, in) @ (in, out) -> (B, L, out)
    return out if bias is None else out + bias


def to_torch_multihead_attention(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` (``batch_first=True``) with ``mha``'s weights.

    PyTorch keeps ``W^Q, W^K, W^V`` stacked in one ``in_proj_weight`` of shape
    ``(3 d_model, d_model)`` and ``W^O`` in ``out_proj``. Remember that its masks use the
    opposite convention: True = may **not** attend.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an aiayn.MultiHeadAttention, got {type(mha).__name__}")
    bias = mha.w_q.bias is not None
    ref = mha.w_q.weight
    theirs = nn.MultiheadAttention(
        mha.d_model, mha.n_heads, bias=bias, batch_first=True, device=ref.device, dtype=ref.dtype
    )
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        theirs.out_proj.weight.copy_(mha.w_o.weight)
        if bias:
            theirs.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
            theirs.out_proj.bias.copy_(mha.w_o.bias)
    return theirs.train(mha.training)


@torch.no_grad()
def permute_heads(mha: MultiHeadAttention, order: list[int]) -> MultiHeadAttention:
    """Renumber the heads in place: new head ``i`` is old head ``order[i]``.

    Moves the row blocks of ``W^Q, W^K, W^V`` (and their biases) and the matching column
    blocks of ``W^O`` together, so the module computes the same function: a head's index
    carries no meaning. Returns ``mha``.
    """
    if sorted(order) != list(range(mha.n_heads)):
        raise ValueError(f"order must be a permutation of 0..{mha.n_heads - 1}, got {order}")
    index = torch.cat([torch.arange(h * mha.d_k, (h + 1) * mha.d_k) for h in order])
    index = index.to(mha.w_q.weight.device)
    for lin in (mha.w_q, mha.w_k, mha.w_v):
        lin.weight.copy_(lin.weight[index])  # rows = output features = head slices
        if lin.bias is not None:
            lin.bias.copy_(lin.bias[index])
    mha.w_o.weight.copy_(mha.w_o.weight[:, index])  # columns = the concatenated heads
    return mha


# ------------------------------------------------------------------------------------- cost


@dataclass(frozen=True)
class AttentionCost:
    """Parameters and FLOPs of one multi-head attention call (a multiply-add = 2 FLOPs)."""

    params: int  # W^Q, W^K, W^V, W^O and their biases
    projection_flops: int  # Q, K, V and output projections
    score_flops: int  # Q K^T, all heads
    mixing_flops: int  # weights @ V, all heads
    weight_entries: int  # entries of the (B, H, T, S) weights: what the softmax runs over

    @property
    def matmul_flops(self) -> int:
        """Everything that is a matrix product (what ``FlopCounterMode`` counts)."""
        return self.projection_flops + self.score_flops + self.mixing_flops


def attention_cost(
    d_model: int, n_heads: int, t_len: int, s_len: int | None = None, batch: int = 1,
    bias: bool = True,
) -> AttentionCost:
    """Closed-form cost of multi-head attention with ``d_k = d_v = d_model / n_heads``.

    Per head the scores ``Q_i K_i^T`` cost ``2 T S d_k`` and the weighted sum of the values
    another ``2 T S d_v``; ``h`` heads cost ``h (2 T S d_k + 2 T S d_v) = 4 T S d_model``, the
    same for every ``h`` (Section 3.2.2: "the total computational cost is similar to that of
    single-head attention with full dimensionality"). The projections cost
    ``2 d_model^2 (2 T + 2 S)`` whatever ``h``. Only the number of softmax entries, ``B h T S``,
    grows with ``h``.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("t_len", t_len), ("batch", batch)):
        _check_positive_int(name, v)
    s_len = t_len if s_len is None else s_len
    _check_positive_int("s_len", s_len)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    d = d_model
    return AttentionCost(
        params=4 * d * d + (4 * d if bias else 0),
        # W^Q on the T queries, W^K and W^V on the S keys, W^O on the T outputs.
        projection_flops=2 * batch * d * d * (2 * t_len + 2 * s_len),
        score_flops=2 * batch * n_heads * t_len * s_len * (d // n_heads),
        mixing_flops=2 * batch * n_heads * t_len * s_len * (d // n_heads),
        weight_entries=batch * n_heads * t_len * s_len,
    )


def count_matmul_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of the matrix products that ``fn(*args, **kwargs)`` runs, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` (it counts ``mm``, ``addmm``, ``bmm`` and
    the GPU attention kernels, not element-wise work such as the softmax).

    Note: PyTorch's fused attention kernel for the CPU is not counted, so count
    :class:`~aiayn.attention.MultiHeadAttention` with ``need_weights=True`` (the explicit path).
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


# ------------------------------------------------------------------------- a small encoder


class TinyEncoder(nn.Module):
    """Token embedding + sinusoidal positions + ``n_layers`` encoder layers + a linear head.

    An encoder-only model that makes one prediction per position, ``(B, T) -> (B, T,
    n_classes)``, small enough to train in seconds on a CPU. Embeddings are scaled by
    ``sqrt(d_model)`` (Section 3.4) from an initial std of ``d_model^-0.5``, so token and
    position signals start at the same scale (unit-variance embeddings would otherwise drown
    the positions). No dropout: the experiments are short and deterministic.
    """

    def __init__(
        self, vocab_size: int, n_classes: int, d_model: int = 64, n_heads: int = 2,
        n_layers: int = 1, d_ff: int = 128, max_len: int = 64, norm_first: bool = False,
    ):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("n_classes", n_classes),
                        ("n_layers", n_layers), ("d_ff", d_ff), ("max_len", max_len)):
            _check_positive_int(name, v)
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.positions = PositionalEncoding(d_model, max_len)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout=0.0, norm_first=norm_first)
            for _ in range(n_layers)
        )
        # Pre-LN leaves the residual stream un-normalised: one LayerNorm before the head.
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, n_classes)

    @property
    def n_heads(self) -> int:
        return self.layers[0].self_attn.n_heads

    def _inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        return self.positions(self.embed(tokens) * math.sqrt(self.d_model))  # (B, T, D)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, T, n_classes)``."""
        x = self._inputs(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor) -> torch.Tensor:
        """Every head's weights, ``(L, B, H, T, T)``, from the same pass as ``forward``.

        Runs the stack layer by layer and asks each layer's attention for its weights on the
        input that layer's attention really sees: the layer input (Post-LN) or its
        LayerNorm (Pre-LN).
        """
        x = self._inputs(tokens)
        maps = []
        for layer in self.layers:
            h = layer.norm1(x) if layer.norm_first else x
            _, weights = layer.self_attn(h, h, h, need_weights=True)  # (B, H, T, T)
            maps.append(weights)
            x = layer(x)
        return torch.stack(maps)  # L x (B, H, T, T) -> (L, B, H, T, T)


# ------------------------------------------------------------------------- head measures


def _check_weights(weights: torch.Tensor, queries: torch.Tensor | None) -> torch.Tensor:
    """Validate ``(B, H, T, S)`` weights; return the ``(B, T)`` float query selector."""
    check_tensor("weights", weights, ndim=4)
    batch, _, t_len, _ = weights.shape
    if queries is None:
        return torch.ones(batch, t_len, device=weights.device, dtype=weights.dtype)
    if queries.dtype != torch.bool or queries.shape != (batch, t_len):
        raise ValueError(
            f"queries must be a boolean (B, T) = {(batch, t_len)} tensor, got "
            f"{queries.dtype} {tuple(queries.shape)}"
        )
    if not queries.any():
        raise ValueError("queries selects no query: nothing to average")
    return queries.to(weights.dtype)


def _mean_over_queries(per_query: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """``(B, H, T)`` -> ``(H,)``: the mean over the selected ``(b, t)``."""
    return (per_query * select[:, None]).sum((0, 2)) / select.sum()


def attention_entropy(weights: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (nats) of each head's rows, ``(B, H, T, S) -> (H,)``.

    0 means every query looks at exactly one key; ``log S`` means uniform attention.
    ``queries``: optional boolean ``(B, T)``, the query rows to average over.
    """
    select = _check_weights(weights, queries)
    plogp = torch.special.xlogy(weights, weights)  # 0 log 0 = 0
    return _mean_over_queries(-plogp.sum(-1), select)


def offset_profile(weights: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Each head's mean attention mass at each relative offset ``s - t``.

    ``(B, H, T, S) -> (H, T + S - 1)``; column ``j`` is the offset ``j - (T - 1)``, so
    column ``T - 2`` is "the previous token", ``T - 1`` "itself". Each row sums to 1 (over
    the selected queries, each row of weights sums to 1).
    """
    select = _check_weights(weights, queries)
    _, n_heads, t_len, s_len = weights.shape
    offsets = torch.arange(s_len, device=weights.device) - torch.arange(t_len, device=weights.device)[:, None]
    index = (offsets + t_len - 1).expand_as(weights)  # (T, S) -> (B, H, T, S)
    per_offset = torch.zeros(*weights.shape[:3], t_len + s_len - 1, dtype=weights.dtype, device=weights.device)
    per_offset.scatter_add_(-1, index, weights)  # (B, H, T, T + S - 1)
    return (per_offset * select[:, None, :, None]).sum((0, 2)) / select.sum()


def mass_on_positions(
    weights: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean weight each head puts on one chosen key per query, ``-> (H,)``.

    ``positions`` ``(B, T)`` holds, for every query, the index of the key of interest
    (e.g. the matching token).
    """
    select = _check_weights(weights, queries)
    batch, n_heads, t_len, s_len = weights.shape
    if positions.shape != (batch, t_len) or positions.dtype.is_floating_point:
        raise ValueError(
            f"positions must be an integer (B, T) = {(batch, t_len)} tensor, got "
            f"{positions.dtype} {tuple(positions.shape)}"
        )
    if positions.min() < 0 or positions.max() >= s_len:
        raise ValueError(f"positions must index keys in [0, {s_len - 1}]")
    index = positions[:, None, :, None].expand(batch, n_heads, t_len, 1)  # (B, H, T, 1)
    return _mean_over_queries(weights.gather(-1, index).squeeze(-1), select)


def head_summary(
    weights: torch.Tensor, matching: torch.Tensor, queries: torch.Tensor | None = None
) -> list[dict[str, float]]:
    """One row per head: what it attends to.

    ``entropy`` (nats), ``top_offset`` (the relative offset with the most mass) and its
    ``top_offset_mass``, ``previous`` (mass at offset -1), ``itself`` (offset 0) and
    ``matching`` (mass on the key ``matching[b, t]``).
    """
    profile = offset_profile(weights, queries)  # (H, T + S - 1)
    t_len = weights.shape[2]
    entropy = attention_entropy(weights, queries)
    match = mass_on_positions(weights, matching, queries)
    rows = []
    for h in range(weights.shape[1]):
        top = int(profile[h].argmax())
        rows.append({
            "entropy": float(entropy[h]),
            "top_offset": top - (t_len - 1),
            "top_offset_mass": float(profile[h, top]),
            "previous": float(profile[h, t_len - 2]) if t_len > 1 else 0.0,
            "itself": float(profile[h, t_len - 1]),
            "matching": float(match[h]),
        })
    return rows
