"""Sinusoidal positional encoding (Section 3.5).

``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and
``PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .utils import check_tensor

__all__ = [
    "sinusoidal_encoding", "PositionalEncoding", "offset_matrix", "frequencies",
    "wavelengths", "LearnedPositionalEncoding",
]


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


def _check_positions(x: torch.Tensor, d_model: int, max_len: int, why: str = "") -> None:
    """``x`` must be ``(B, T, d_model)`` with ``T <= max_len``."""
    check_tensor("x", x, ndim=3)
    if x.shape[-1] != d_model:
        raise ValueError(f"x must have d_model={d_model} features, got shape {tuple(x.shape)}")
    if x.shape[1] > max_len:
        raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={max_len}{why}")


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
        _check_positions(x, self.d_model, self.max_len)
        length = x.shape[1]
        if x.dtype == torch.float64:
            # The buffer holds float32 values (MPS has no float64); .double() cannot restore the
            # lost digits, so a float64 model gets a table computed afresh in float64.
            pe = sinusoidal_encoding(length, self.d_model, torch.float64).to(x.device)
        else:
            pe = self.pe[:length].to(x.dtype)
        return self.dropout(x + pe)  # (T, D) broadcasts over B


def wavelengths(d_model: int) -> torch.Tensor:
    """The wavelength ``2*pi / omega_i`` of each sine/cosine pair, shape ``(d_model/2,)``, float64.

    Section 3.5 says they "form a geometric progression from 2*pi to 10000 * 2*pi". The first
    is exactly ``2*pi`` (``i = 0``); the last pair has ``2i = d_model - 2``, so its wavelength
    is ``2*pi * 10000^((d_model - 2) / d_model)``: it approaches ``10000 * 2*pi`` as
    ``d_model`` grows but never reaches it.
    """
    return 2 * math.pi / frequencies(d_model)


class LearnedPositionalEncoding(nn.Module):
    """A trained table of position vectors, added to the token embeddings, then dropout.

    The alternative the paper compared with the sinusoids (Section 3.5, Table 3 row E):
    one free ``d_model``-vector per position, ``P[:T]`` added to ``x``. Same forward
    contract as :class:`PositionalEncoding`. A position only gets a gradient when a
    sequence that long is trained on, so rows past the longest training length keep
    their initial values; past ``max_len`` there is no row at all, and ``forward``
    raises instead of guessing.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        for name, value in (("d_model", d_model), ("max_len", max_len)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.max_len = d_model, max_len
        # N(0, 1) like nn.Embedding: entries of the same order as the sinusoids' [-1, 1].
        self.table = nn.Parameter(torch.randn(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, T, d_model)`` -> ``x + P[:T]``, same shape."""
        _check_positions(x, self.d_model, self.max_len,
                         why=": a learned table has no row for those positions")
        return self.dropout(x + self.table[: x.shape[1]].to(x.dtype))  # (T, D) broadcasts over B
