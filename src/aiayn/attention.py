"""Scaled dot-product attention (Eq. 1 of the paper) and multi-head attention (Section 3.2.2).

Shapes use the book's notation: ``B`` batch, ``H`` heads, ``T`` query positions,
``S`` key/value positions, ``d_k`` query/key width, ``d_v`` value width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .masks import check_mask
from .utils import check_tensor

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention"]


def _check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """Shapes must line up: (..., T, d_k), (..., S, d_k), (..., S, d_v) with equal leading dims."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, x, min_dim=2)
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(
            "query, key and value must have the same number of dimensions, got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            "query, key and value must have the same batch dimensions, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, {tuple(value.shape[:-2])}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same feature size d_k, got {query.shape[-1]} "
            f"and {key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length S, got {key.shape[-2]} and {value.shape[-2]}"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )


def _rows_with_a_key(mask: torch.Tensor | None) -> torch.Tensor | None:
    """``(..., T, 1)`` boolean: which query rows may attend to at least one key."""
    return None if mask is None else mask.any(dim=-1, keepdim=True)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(d_k)) V``, step by step (Eq. 1).

    Args:
        query: ``(..., T, d_k)``.
        key: ``(..., S, d_k)``.
        value: ``(..., S, d_v)``.
        mask: boolean, broadcastable to ``(..., T, S)``; **True = may attend**.
            A query row whose keys are all masked gets zero weights and a zero output
            (a softmax over nothing is undefined; zeros keep NaN out of the model).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        dropout_p: dropout on the weights before they mix the values (training only).

    Returns:
        ``(output, weights)``: output ``(..., T, d_v)`` and the attention weights
        ``(..., T, S)`` (before dropout), each row summing to 1 (or 0 if fully masked).
    """
    _check_qkv(query, key, value)
    scores_shape = (*query.shape[:-1], key.shape[-2])  # (..., T, S)
    if mask is not None:
        check_mask(mask, scores_shape)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    elif not math.isfinite(float(scale)):
        raise ValueError(f"scale must be a finite number, got {scale}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")

    scores = query @ key.transpose(-2, -1) * scale  # (..., T, d_k) @ (..., d_k, S) -> (..., T, S)
    has_key = _rows_with_a_key(mask)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        # A fully masked row would be softmax(-inf, ..., -inf) = NaN; give it finite
        # scores here and zero its weights below.
        scores = scores.masked_fill(~has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    if has_key is not None:
        weights = weights.masked_fill(~has_key, 0.0)
    mixing = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return mixing @ value, weights  # (..., T, S) @ (..., S, d_v) -> (..., T, d_v)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Section 3.2.2): ``Concat(head_1..head_h) W^O``.

    ``h = n_heads`` heads, each of width ``d_k = d_v = d_model / h``, computed as one
    batched matrix product. Two paths give the same output:

    * the **explicit** path (``need_weights=True``) runs
      :func:`scaled_dot_product_attention` and also returns the ``(B, H, T, S)``
      weights, for plots;
    * the **fused** path (the default) calls
      :func:`torch.nn.functional.scaled_dot_product_attention`, which never stores
      the ``T x S`` weight matrix and is faster.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        for name, v in (("d_model", d_model), ("n_heads", n_heads)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads}): "
                "each head gets d_k = d_model / n_heads features"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads = d_model, n_heads
        self.d_k = d_model // n_heads
        self.dropout = dropout
        # W^Q, W^K, W^V for all heads at once (head i owns columns i*d_k..(i+1)*d_k), and W^O.
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_k).transpose(1, 2)  # (B, L, D) -> (B, H, L, d_k)

    def _check_inputs(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3)
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have d_model={self.d_model} features, got shape {tuple(x.shape)}"
                )
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                "query, key and value must have the same batch size, got "
                f"{query.shape[0]}, {key.shape[0]}, {value.shape[0]}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length S, got {key.shape[1]} and {value.shape[1]}"
            )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``query`` ``(B, T, d_model)`` to ``key``/``value`` ``(B, S, d_model)``.

        ``mask`` is boolean (True = may attend) and broadcasts to ``(B, H, T, S)``,
        e.g. :func:`~aiayn.masks.causal_mask` ``(T, T)`` or
        :func:`~aiayn.masks.padding_mask` ``(B, 1, 1, S)``.
        Returns ``output`` ``(B, T, d_model)``, or ``(output, weights)`` with weights
        ``(B, H, T, S)`` when ``need_weights`` is True. A query whose keys are all masked
        gets zero weights and zero heads, so its output is the bias of ``w_o`` (as in
        :class:`torch.nn.MultiheadAttention`), never NaN.
        """
        self._check_inputs(query, key, value)
        batch, t_len, s_len = query.shape[0], query.shape[1], key.shape[1]
        if mask is not None:
            check_mask(mask, (batch, self.n_heads, t_len, s_len))
        q = self._split_heads(self.w_q(query))  # (B, H, T, d_k)
        k = self._split_heads(self.w_k(key))  # (B, H, S, d_k)
        v = self._split_heads(self.w_v(value))  # (B, H, S, d_k)
        p = self.dropout if self.training else 0.0

        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        else:
            heads, weights = self._fused(q, k, v, mask, p), None
        concat = heads.transpose(1, 2).reshape(batch, t_len, self.d_model)  # (B, H, T, d_k) -> (B, T, d_model)
        output = self.w_o(concat)
        return (output, weights) if need_weights else output

    def forward_cached(
        self,
        query: torch.Tensor,
        cache: dict,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Incremental decoding: attention for new query positions, reusing cached keys and values.

        Self-attention (``memory`` None): the keys and values of ``query`` ``(B, 1, d_model)``
        are appended to ``cache["k"]``, ``cache["v"]`` ``(B, H, t, d_k)``, and the new position
        attends to every cached one (all earlier, so no causal mask is needed).
        Cross-attention: the keys and values of ``memory`` are computed on the first call
        and reused afterwards. Gives the same output as :meth:`forward` on the full prefix.
        """
        check_tensor("query", query, ndim=3)
        batch, t_len = query.shape[0], query.shape[1]
        q = self._split_heads(self.w_q(query))  # (B, H, t_new, d_k)
        if memory is None:
            k_new = self._split_heads(self.w_k(query))  # (B, H, t_new, d_k)
            v_new = self._split_heads(self.w_v(query))
            if "k" in cache:
                k_new = torch.cat([cache["k"], k_new], dim=2)  # (B, H, t_old + t_new, d_k)
                v_new = torch.cat([cache["v"], v_new], dim=2)
            cache["k"], cache["v"] = k_new, v_new
            mask = None if t_len == 1 else _causal_mask_tail(t_len, k_new.shape[2], query.device)
        else:
            if "k" not in cache:
                cache["k"] = self._split_heads(self.w_k(memory))  # (B, H, S, d_k)
                cache["v"] = self._split_heads(self.w_v(memory))
            mask = memory_mask
        heads = self._fused(q, cache["k"], cache["v"], mask, 0.0)
        concat = heads.transpose(1, 2).reshape(batch, t_len, self.d_model)  # (B, H, t, d_k) -> (B, t, d_model)
        return self.w_o(concat)

    @staticmethod
    def _fused(q, k, v, mask: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
        """PyTorch's fused kernel, with fully masked query rows set to zero on every backend."""
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        has_key = _rows_with_a_key(mask)
        # Let fully masked rows attend everywhere (finite on every kernel), then zero them.
        safe_mask = mask | ~has_key
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=safe_mask, dropout_p=dropout_p)
        return out.masked_fill(~has_key, 0.0)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k}, dropout={self.dropout}"


def _causal_mask_tail(t_new: int, t_total: int, device=None) -> torch.Tensor:
    """The last ``t_new`` rows of a ``(t_total, t_total)`` causal mask: new queries that
    follow ``t_total - t_new`` cached positions may attend up to their own position."""
    rows = torch.arange(t_total - t_new, t_total, device=device)[:, None]  # (t_new, 1)
    return torch.arange(t_total, device=device)[None, :] <= rows  # (t_new, t_total)
