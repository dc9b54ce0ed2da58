"""The book's plotting style, shared by every figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["use_book_style"]


def use_book_style() -> None:
    """One look for every figure of the book: readable fonts, no top/right spines, PNG output."""
    plt.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": False,
        "image.cmap": "Blues",
        "figure.constrained_layout.use": True,
    })
    try:  # PNG only: SVG text is not byte-stable and nbval compares outputs
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # not in IPython
        pass


def _as_2d(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double().numpy()
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D (queries, keys) matrix, got shape {weights.shape}")
    return weights
