"""The full encoder-decoder Transformer (Figure 1) and its configuration (Table 3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from .layers import Decoder, Encoder
from .masks import causal_mask, padding_mask
from .positional import PositionalEncoding, sinusoidal_encoding
from .utils import check_tensor, check_tokens

__all__ = ["TransformerConfig", "Transformer", "count_parameters"]

# The paper's English-German models share one byte-pair vocabulary of "about 37000 tokens".
PAPER_VOCAB = 37_000


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of :class:`Transformer`; ``base()`` and ``big()`` are Table 3's models."""

    src_vocab: int  # source vocabulary size
    tgt_vocab: int  # target vocabulary size (equal to src_vocab when embeddings are shared)
    d_model: int = 512  # width of every token representation
    n_heads: int = 8  # h: attention heads per layer, each d_k = d_model / h wide
    n_layers: int = 6  # N: layers in the encoder and in the decoder
    d_ff: int = 2048  # inner width of the feed-forward network
    dropout: float = 0.1  # P_drop: on sub-layer outputs, embedding sums and attention weights
    max_len: int = 5000  # longest sequence the positional table covers
    pad_id: int = 0  # token id of padding; masked out of attention by default
    norm_first: bool = False  # False: Post-LN as in the paper; True: Pre-LN
    share_embeddings: bool = True  # one matrix for source, target and pre-softmax weights (3.4)

    def __post_init__(self) -> None:
        for name in ("src_vocab", "tgt_vocab", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for the sinusoidal encoding, got {self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                "share_embeddings=True needs src_vocab == tgt_vocab (one shared vocabulary), "
                f"got {self.src_vocab} and {self.tgt_vocab}"
            )
        if not 0 <= self.pad_id < min(self.src_vocab, self.tgt_vocab):
            raise ValueError(f"pad_id must be a valid token id, got {self.pad_id}")

    @property
    def d_k(self) -> int:
        """Width of each head's queries, keys and values, d_model / n_heads."""
        return self.d_model // self.n_heads

    @classmethod
    def base(cls, **overrides) -> TransformerConfig:
        """Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (65M parameters in the paper)."""
        config = cls(src_vocab=PAPER_VOCAB, tgt_vocab=PAPER_VOCAB)
        return replace(config, **overrides)

    @classmethod
    def big(cls, **overrides) -> TransformerConfig:
        """Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M parameters in the paper)."""
        config = cls(src_vocab=PAPER_VOCAB, tgt_vocab=PAPER_VOCAB,
                     d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)
        return replace(config, **overrides)


class Transformer(nn.Module):
    """Encoder-decoder Transformer. ``forward(src, tgt)`` returns next-token logits.

    The easy call is the correct one: padding in ``src`` and ``tgt`` (``pad_id``) is
    masked out of attention, and the decoder cannot look ahead (causal mask).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab, c.d_model)
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)
        self.decoder = Decoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab, bias=False)  # pre-softmax projection
        self._reset_parameters()
        if c.share_embeddings:
            self.generator.weight = self.tgt_embed.weight  # tied after init: one matrix, three uses

    def _reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
            elif isinstance(module, nn.Embedding):
                # std d_model^-0.5 so that embedding * sqrt(d_model) has unit-variance entries.
                nn.init.normal_(module.weight, std=self.config.d_model**-0.5)

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.config.d_model)  # Section 3.4: embeddings times sqrt(d_model)
        return self.positional(embedding(tokens) * scale)  # (B, L) -> (B, L, d_model)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``src`` ``(B, S)`` token ids -> memory ``(B, S, d_model)``."""
        check_tokens("src", src, self.config.src_vocab, self.config.max_len)
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        return self.encoder(self._embed(self.src_embed, src), src_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``tgt`` ``(B, T)`` token ids and ``memory`` ``(B, S, d_model)`` -> logits ``(B, T, tgt_vocab)``.

        ``tgt_mask`` defaults to causal and padding masks combined; ``memory_mask``
        (e.g. ``padding_mask(src, pad_id)``) to none.
        """
        check_tokens("tgt", tgt, self.config.tgt_vocab, self.config.max_len)
        check_tensor("memory", memory, ndim=3)
        if memory.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"memory batch size {memory.shape[0]} does not match tgt batch size {tgt.shape[0]}"
            )
        if tgt_mask is None:
            causal = causal_mask(tgt.shape[1], device=tgt.device)  # (T, T)
            tgt_mask = causal & padding_mask(tgt, self.config.pad_id)  # -> (B, 1, T, T)
        hidden = self.decoder(self._embed(self.tgt_embed, tgt), memory, tgt_mask, memory_mask)
        return self.generator(hidden)

    def decode_step(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        caches: list[dict],
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Incremental decoding: logits ``(B, t_new, tgt_vocab)`` of the new tokens ``tgt``
        ``(B, t_new)`` only, reusing the keys and values cached in ``caches`` (one dict per
        decoder layer, start with ``[{} for _ in range(n_layers)]``).

        Equal, up to rounding, to the last ``t_new`` rows of :meth:`decode` on the whole
        prefix, at a cost per step that does not grow with the prefix's length squared.
        No padding in the prefix: the decoder's padding mask is not applied."""
        check_tokens("tgt", tgt, self.config.tgt_vocab)
        start = caches[0]["self"]["k"].shape[2] if caches and "self" in caches[0] else 0
        end = start + tgt.shape[1]
        if end > self.config.max_len:
            raise ValueError(f"decoding past max_len={self.config.max_len}")
        x = self.tgt_embed(tgt) * math.sqrt(self.config.d_model)  # (B, t_new, d_model)
        if x.dtype == torch.float64:  # as PositionalEncoding.forward: a float64 table
            pe = sinusoidal_encoding(end, self.config.d_model, torch.float64).to(x.device)[start:]
        else:
            pe = self.positional.pe[start:end].to(x.dtype)
        x = self.positional.dropout(x + pe)  # positions start .. end - 1
        return self.generator(self.decoder.forward_step(x, memory, caches, memory_mask))

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """``src`` ``(B, S)``, ``tgt`` ``(B, T)`` (shifted right) -> logits ``(B, T, tgt_vocab)``."""
        check_tokens("src", src, self.config.src_vocab, self.config.max_len)
        if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2 or tgt.shape[0] != src.shape[0]:
            shape = tuple(tgt.shape) if isinstance(tgt, torch.Tensor) else type(tgt).__name__
            raise ValueError(f"tgt must be (batch={src.shape[0]}, length) token ids, got {shape}")
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, memory_mask=src_mask)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters; a weight shared by several layers is counted once."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    # Module.parameters() yields each distinct tensor once, so tied weights count once.
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
