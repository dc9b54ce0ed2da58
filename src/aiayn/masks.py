"""Attention masks. Convention: boolean, **True = may attend**.

This is the convention of :func:`torch.nn.functional.scaled_dot_product_attention`.
Note that :class:`torch.nn.MultiheadAttention` uses the opposite (True = blocked),
so a mask passed to it must be inverted with ``~mask``.
"""

from __future__ import annotations

import torch

__all__ = ["causal_mask", "padding_mask", "check_mask"]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The decoder's look-ahead mask: position ``t`` may attend to positions ``<= t``.

    Returns a ``(size, size)`` boolean lower-triangular matrix.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mask out padding keys: True where ``tokens != pad_id``.

    ``tokens`` has shape ``(B, S)``; the result has shape ``(B, 1, 1, S)`` so it
    broadcasts over heads and query positions of a ``(B, H, T, S)`` score matrix.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be a (batch, length) tensor of token ids, got {shape}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    return (tokens != pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise a clear error unless ``mask`` is boolean and broadcasts to ``scores_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}"
        )
    target = tuple(scores_shape)
    try:
        broadcast = torch.broadcast_shapes(tuple(mask.shape), target)
    except RuntimeError:
        broadcast = None
    if broadcast != target:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores' shape {target} (batch, heads, queries, keys)"
        )
