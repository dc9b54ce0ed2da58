"""Small helpers every chapter uses: seeding, device choice, input checks, and glue.

The checking helpers raise ``ValueError``/``TypeError`` with a message that names
the argument and what was expected, so a reader who passes the wrong shape gets a
sentence, not a deep PyTorch traceback.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["set_seed", "get_device", "glue", "check_tensor", "check_tokens"]


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every GPU) so a chapter re-runs identically."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_device() -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def glue(name: str, value: Any, display: bool = False) -> None:
    """Store ``value`` under ``name`` for the book's prose (MyST-NB ``glue``).

    Outside a Jupyter Book build (Colab, plain Jupyter without myst-nb) this is a
    no-op, so chapters run anywhere. NumPy and one-element tensor scalars become
    Python numbers, so ``{glue:text}`name:.3f``` can format them. Returns None, so a
    glue call that ends a cell prints nothing.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:  # Colab or a bare environment: nothing to glue into
        return None
    _myst_glue(name, value, display=display)


def check_tensor(name: str, x: Any, min_dim: int | None = None, ndim: int | None = None) -> None:
    """Raise a clear error unless ``x`` is a non-empty floating tensor of the right rank."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if min_dim is not None and x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}"
        )
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")


def check_tokens(name: str, tokens: Any, vocab_size: int, max_len: int | None = None) -> None:
    """Raise a clear error unless ``tokens`` is a (B, T) integer tensor of valid ids."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(tokens.shape)}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(tokens.shape)}")
    if max_len is not None and tokens.shape[1] > max_len:
        raise ValueError(
            f"{name} has length {tokens.shape[1]}, longer than max_len={max_len}"
        )
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} holds token ids in [{low}, {high}], expected ids in [0, {vocab_size - 1}]"
        )
