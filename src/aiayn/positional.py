"""Sinusoidal positional encoding (Section 3.5).

``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and
``PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .utils import check_tensor

__all__ = ["sinusoidal_encoding", "PositionalEncoding", "offset_matrix", "frequencies"]


def _check_d_model(d_model: int) -> None:
    if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model < 2 or d_model % 2:
        raise ValueError(
            f"d_model must be a positive even int (sine and cosine come in pairs), got {d_model!r}"
        )


def frequencies(d_model: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The angular frequency of each sine/cosine pair: ``omega_i = 10000^(-2i/d_model)``, shape ``(d_model/2,)``."""
    _check_d_model(d_model)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return torch.exp(-math.log(10000.0) * two_i / d_model).to(dtype)


def sinusoidal_encoding(
    n_positions: int, d_model: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The ``(n_positions, d_model)`` table of encodings; even columns sine, odd columns cosine.

    Computed in float64 and cast to ``dtype`` (default: PyTorch's default dtype).
    """
    if not isinstance(n_positions, int) or isinstance(n_positions, bool) or n_positions < 1:
        raise ValueError(f"n_positions must be a positive int, got {n_positions!r}")
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * frequencies(d_model)  # (n, d/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(dtype or torch.get_default_dtype())


def offset_matrix(k: int, d_model: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The linear map that shifts an encoding by ``k`` positions: ``PE[p + k] = PE[p] @ M.T``.

    Block-diagonal: for each frequency ``omega`` a 2x2 rotation by ``k * omega`` acting on the
    (sin, cos) pair, from sin(a + b) = sin a cos b + cos a sin b and
    cos(a + b) = cos a cos b - sin a sin b. It depends on ``k`` only, not on ``p``.
    """
    if not isinstance(k, int) or isinstance(k, bool):
        raise TypeError(f"k must be an int offset, got {type(k).__name__}")
    theta = k * frequencies(d_model)  # (d/2,)
    cos, sin = torch.cos(theta), torch.sin(theta)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx] = cos  # new sin <- cos(k w) * sin
    m[idx, idx + 1] = sin  # new sin <- sin(k w) * cos
    m[idx + 1, idx] = -sin  # new cos <- -sin(k w) * sin
    m[idx + 1, idx + 1] = cos  # new cos <- cos(k w) * cos
    return m.to(dtype or torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to token embeddings, then applies dropout (Section 5.4)."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.max_len = d_model, max_len
        # A buffer, not a parameter: fixed, moves with .to(device), not saved as trainable.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, torch.float32), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, T, d_model)`` -> ``x + PE[:T]``, same shape."""
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have d_model={self.d_model} features, got shape {tuple(x.shape)}")
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={self.max_len}")
        length = x.shape[1]
        if x.dtype == torch.float64:
            # The buffer holds float32 values (MPS has no float64); .double() cannot restore the
            # lost digits, so a float64 model gets a table computed afresh in float64.
            pe = sinusoidal_encoding(length, self.d_model, torch.float64).to(x.device)
        else:
            pe = self.pe[:length].to(x.dtype)
        return self.dropout(x + pe)  # (T, D) broadcasts over B
