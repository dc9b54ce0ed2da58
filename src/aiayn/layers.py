"""The encoder and decoder layers (Section 3.1) and their N-layer stacks.

Each sub-layer is wrapped in a residual connection and LayerNorm. The paper's
placement, Post-LN (``norm_first=False``), normalises after the residual sum:
``x = LayerNorm(x + Sublayer(x))``. Pre-LN (``norm_first=True``) normalises the
sub-layer's input instead, ``x = x + Sublayer(LayerNorm(x))``, and then needs one
final LayerNorm after the stack.

Two options serve pretrained encoders such as BERT (:mod:`aiayn.pretrained`) and change
nothing by default: ``activation`` (the paper's ReLU, or the exact erf GELU) and
``layer_norm_eps`` (PyTorch's 1e-5, or BERT's 1e-12).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention

__all__ = ["FeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder"]

# The feed-forward activations: the paper's ReLU, and BERT's GELU (the exact erf form,
# ``x * Phi(x)``, not the tanh approximation, so that BERT's weights give BERT's outputs).
_ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu}


def _check_activation(activation: str) -> None:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")


def _check_eps(layer_norm_eps: float) -> None:
    if not isinstance(layer_norm_eps, (int, float)) or not 0 < layer_norm_eps < 1:
        raise ValueError(f"layer_norm_eps must be a small positive number, got {layer_norm_eps!r}")


class FeedForward(nn.Module):
    """Position-wise feed-forward network (Eq. 2): ``max(0, x W1 + b1) W2 + b2``.

    ``activation="gelu"`` replaces ``max(0, .)`` by GELU, as BERT does."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        _check_activation(activation)
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)  # W1: d_model -> d_ff
        self.linear2 = nn.Linear(d_ff, d_model)  # W2: d_ff -> d_model
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, d_model) -> (B, T, d_model)``, each position on its own."""
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (B, T, d_ff)
        return self.linear2(self.dropout(hidden))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with a residual connection and LayerNorm.

    ``activation`` is the feed-forward's (``"relu"`` or ``"gelu"``) and ``layer_norm_eps``
    the epsilon of both LayerNorms; the defaults are the paper's layer."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
        *, activation: str = "relu", layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        _check_eps(layer_norm_eps)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def _self_attention(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask))

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.feed_forward(x))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``(B, S, d_model)``; ``mask`` broadcasts to ``(B, H, S, S)`` (True = may attend)."""
        if self.norm_first:  # Pre-LN
            x = x + self._self_attention(self.norm1(x), mask)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._self_attention(x, mask))  # Post-LN, the paper's
        return self.norm2(x + self._feed_forward(x))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, then feed-forward."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))

    def _self_attention(self, x, tgt_mask):
        return self.dropout1(self.self_attn(x, x, x, tgt_mask))

    def _cross_attention(self, x, memory, memory_mask):
        # Queries from the decoder; keys and values from the encoder's output.
        return self.dropout2(self.cross_attn(x, memory, memory, memory_mask))

    def _feed_forward(self, x):
        return self.dropout3(self.feed_forward(x))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x`` ``(B, T, d_model)``, ``memory`` ``(B, S, d_model)``; masks broadcast to
        ``(B, H, T, T)`` and ``(B, H, T, S)``."""
        if self.norm_first:  # Pre-LN
            x = x + self._self_attention(self.norm1(x), tgt_mask)
            x = x + self._cross_attention(self.norm2(x), memory, memory_mask)
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + self._self_attention(x, tgt_mask))  # Post-LN, the paper's
        x = self.norm2(x + self._cross_attention(x, memory, memory_mask))
        return self.norm3(x + self._feed_forward(x))


    def forward_step(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        cache: dict,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Incremental decoding: ``x`` ``(B, t_new, d_model)`` holds only the new positions;
        the earlier ones live in ``cache`` (keys and values of both attentions).
        Same result as :meth:`forward` on the whole prefix with a causal mask."""
        self_cache, cross_cache = cache.setdefault("self", {}), cache.setdefault("cross", {})

        def attend_self(h):
            return self.dropout1(self.self_attn.forward_cached(h, self_cache))

        def attend_memory(h):
            return self.dropout2(self.cross_attn.forward_cached(h, cross_cache, memory, memory_mask))

        if self.norm_first:  # Pre-LN
            x = x + attend_self(self.norm1(x))
            x = x + attend_memory(self.norm2(x))
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + attend_self(x))  # Post-LN, the paper's
        x = self.norm2(x + attend_memory(x))
        return self.norm3(x + self._feed_forward(x))


class Encoder(nn.Module):
    """``n_layers`` encoder layers; a final LayerNorm only for Pre-LN.

    ``activation`` and ``layer_norm_eps`` go to every layer (see :class:`EncoderLayer`)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 dropout: float = 0.1, norm_first: bool = False,
                 *, activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first,
                         activation=activation, layer_norm_eps=layer_norm_eps)
            for _ in range(n_layers)
        )
        # Post-LN layers already end in a LayerNorm; Pre-LN leaves the residual stream un-normalised.
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Decoder(nn.Module):
    """``n_layers`` decoder layers; a final LayerNorm only for Pre-LN."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x, memory, tgt_mask=None, memory_mask=None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x)

    def forward_step(self, x, memory, caches: list[dict], memory_mask=None) -> torch.Tensor:
        """Incremental decoding through every layer; ``caches`` holds one dict per layer."""
        if len(caches) != len(self.layers):
            raise ValueError(f"caches must hold one dict per layer ({len(self.layers)}), got {len(caches)}")
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer.forward_step(x, memory, cache, memory_mask)
        return self.norm(x)
