"""Table 1 of the paper as code (chapter 8): per-layer FLOP counts,
sequential operations and maximum path lengths of self-attention, recurrent, convolutional and
restricted layers, and the bare layers whose costs are measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "LAYER_KINDS",
    "ALL_LAYER_KINDS",
    "LayerCost",
    "layer_cost",
    "crossover_length",
    "encoder_layer_flops",
    "quadratic_half_length",
    "attention_core",
    "restricted_attention_core",
    "recurrent_core",
    "Conv1dLayer",
    "SeparableConv1dLayer",
]


#: The four layer types of the paper's Table 1, in its order.
LAYER_KINDS = ("self-attention", "recurrent", "convolutional", "restricted")


#: Table 1's rows and the separable convolution that Section 4's text adds
#: ("decrease the complexity considerably, to O(k n d + n d^2)").
ALL_LAYER_KINDS = (*LAYER_KINDS, "separable")


@dataclass(frozen=True)
class LayerCost:
    """One row of Table 1 for one ``(n, d)``, as numbers instead of O(.) classes."""

    kind: str
    flops: int  # the operations Table 1 counts, one sequence, a multiply-add = 2 FLOPs
    sequential_ops: int  # operations that must wait for the previous one
    max_path_length: int  # hops from any input position to any output position


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def layer_cost(kind: str, n: int, d: int, k: int = 3, r: int = 3) -> LayerCost:
    """Table 1 of the paper for a sequence of ``n`` vectors of width ``d``.

    * self-attention: scores ``Q K^T`` and mixing ``A V``, ``2 n^2 d`` each:
      ``4 n^2 d`` = O(n^2 d); O(1) sequential operations; every output sees every
      input in 1 hop.
    * recurrent: ``W_hh h_{t-1}`` and ``W_xh x_t`` per step, ``2 d^2`` each:
      ``4 n d^2`` = O(n d^2); n sequential steps; x_1 reaches h_n in n steps.
    * convolutional (kernel ``k``, ``d`` channels in and out): ``2 k n d^2``
      = O(k n d^2); contiguous kernels need ``ceil((n - 1) / ((k - 1) // 2))``
      layers to connect the two ends (O(n/k); the paper's O(log_k n) is for
      dilated kernels).
    * restricted self-attention (a window of ``r`` positions around each query):
      ``4 n r d`` = O(r n d); ``ceil((n - 1) / ((r - 1) // 2))`` layers (O(n/r)).
    * separable convolution (not a row of Table 1; Section 4's text): a depthwise kernel
      ``k`` per channel, ``2 k n d``, then a pointwise ``d x d`` map, ``2 n d^2``:
      O(k n d + n d^2); the same path length as the convolution with the same kernel.

    ``k`` and ``r`` must be odd (a centred window) and at least 3. The projections
    ``W^Q, W^K, W^V, W^O`` (``8 n d^2``) are not in Table 1's self-attention row.
    """
    if kind not in ALL_LAYER_KINDS:
        raise ValueError(f"kind must be one of {ALL_LAYER_KINDS}, got {kind!r}")
    for name, value in (("n", n), ("d", d), ("k", k), ("r", r)):
        _check_positive_int(name, value)
    for name, value in (("k", k), ("r", r)):
        if value < 3 or value % 2 == 0:
            raise ValueError(f"{name} must be an odd int >= 3 (a centred window), got {value}")
    if kind == "self-attention":
        return LayerCost(kind, 4 * n * n * d, 1, 1)
    if kind == "recurrent":
        return LayerCost(kind, 4 * n * d * d, n, n)
    reach = ((r if kind == "restricted" else k) - 1) // 2  # positions per side per layer
    hops = max(1, math.ceil((n - 1) / reach))
    if kind == "convolutional":
        return LayerCost(kind, 2 * k * n * d * d, 1, hops)
    if kind == "separable":
        return LayerCost(kind, 2 * k * n * d + 2 * n * d * d, 1, hops)
    return LayerCost(kind, 4 * n * r * d, 1, hops)


def crossover_length(d: int) -> float:
    """The ``n`` where self-attention and recurrent FLOPs meet: ``4 n^2 d = 4 n d^2``,
    so ``n = d`` (Section 4: self-attention is cheaper "when the sequence length n is
    smaller than the representation dimensionality d")."""
    _check_positive_int("d", d)
    return float(d)


def encoder_layer_flops(n: int, d_model: int, d_ff: int) -> dict[str, int]:
    """FLOPs of one encoder layer on one sequence of ``n`` positions, by part:

    * ``"projections"``: ``W^Q, W^K, W^V, W^O``, ``8 n d_model^2``;
    * ``"attention"``: the scores ``Q K^T`` and the weighted sum ``A V``, ``4 n^2 d_model``
      (the only terms in ``n^2``; the heads split ``d_model``, not the work);
    * ``"feed-forward"``: two ``d_model x d_ff`` maps, ``4 n d_model d_ff``.

    Matrix products only, as ``FlopCounterMode`` counts them (biases, softmax and
    LayerNorm are element-wise and left out).
    """
    for name, value in (("n", n), ("d_model", d_model), ("d_ff", d_ff)):
        _check_positive_int(name, value)
    return {
        "projections": 8 * n * d_model * d_model,
        "attention": 4 * n * n * d_model,
        "feed-forward": 4 * n * d_model * d_ff,
    }


def quadratic_half_length(d_model: int, d_ff: int) -> int:
    """The ``n`` at which attention's ``n^2`` terms are exactly half of an encoder layer's
    FLOPs (:func:`encoder_layer_flops`): ``4 n^2 d = 8 n d^2 + 4 n d d_ff`` gives
    ``n = 2 d_model + d_ff``. Below it the per-position maps cost more, above it attention.
    """
    _check_positive_int("d_model", d_model)
    _check_positive_int("d_ff", d_ff)
    return 2 * d_model + d_ff


def attention_core(x: torch.Tensor) -> torch.Tensor:
    """Self-attention without projections, ``softmax(x x^T / sqrt(d)) x``: exactly the
    ``Q K^T`` and ``A V`` products that Table 1's O(n^2 d) counts. ``x``: ``(B, n, d)``."""
    scores = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1])  # (B, n, n)
    return torch.softmax(scores, dim=-1) @ x  # (B, n, d)


def restricted_attention_core(x: torch.Tensor, r: int) -> torch.Tensor:
    """Self-attention restricted to the ``r`` positions centred on each query (odd ``r``).

    The keys are cut into windows with ``unfold``, so the cost is ``4 n r d``, not
    ``4 n^2 d``; positions beyond the ends are masked. ``x``: ``(B, n, d)``.
    """
    _check_positive_int("r", r)
    if r % 2 == 0:
        raise ValueError(f"r must be odd (a window centred on the query), got {r}")
    batch, n, d = x.shape
    half = r // 2
    padded = torch.nn.functional.pad(x, (0, 0, half, half))  # (B, n + r - 1, d)
    windows = padded.unfold(1, r, 1)  # (B, n, d, r): keys j - half .. j + half
    scores = (x.unsqueeze(-2) @ windows).squeeze(-2) / math.sqrt(d)  # (B, n, r)
    position = torch.arange(n, device=x.device).unsqueeze(1) + torch.arange(r, device=x.device)
    inside = (position >= half) & (position < n + half)  # (n, r): not padding
    weights = torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1)
    return (windows @ weights.unsqueeze(-1)).squeeze(-1)  # (B, n, d, r) @ (B, n, r, 1) -> (B, n, d)


def recurrent_core(x: torch.Tensor, w_xh: torch.Tensor, w_hh: torch.Tensor,
                   window: int | None = None) -> torch.Tensor:
    """``h_t = tanh(x_t W_xh + h_{t-1} W_hh)`` for every ``t``: Table 1's recurrent layer.

    ``window`` (default: all) limits how many steps back the recurrence reaches:
    ``h_t`` is computed from ``h = 0`` at ``t - window``, so a path from ``x_j`` to
    ``h_t`` exists only if it takes at most ``window`` steps (for
    :func:`~aiayn.experiments.measurement.hops_to_connect`). ``x``: ``(B, n, d)``; returns ``(B, n, d)``.
    """
    batch, n, d = x.shape
    xw = x @ w_xh  # (B, n, d): no recurrence, one product
    if window is None or window >= n:
        h, out = x.new_zeros(batch, d), []
        for t in range(n):  # n sequential steps
            h = torch.tanh(xw[:, t] + h @ w_hh)
            out.append(h)
        return torch.stack(out, dim=1)
    out = []
    for t in range(n):
        h = x.new_zeros(batch, d)
        for s in range(max(0, t - window + 1), t + 1):
            h = torch.tanh(xw[:, s] + h @ w_hh)
        out.append(h)
    return torch.stack(out, dim=1)


def _check_kernel(d_model, k) -> None:
    """A width and an odd kernel centred on each position, for the convolutional layers."""
    _check_positive_int("d_model", d_model)
    _check_positive_int("k", k)
    if k % 2 == 0:
        raise ValueError(f"k must be odd (a kernel centred on the position), got {k}")


class Conv1dLayer(nn.Module):
    """A convolutional layer over the sequence, batch-first: ``(B, n, d) -> (B, n, d)``.

    ``d`` channels in and out, an odd kernel ``k`` centred on each position (zero
    padding keeps the length), no bias: ``2 k n d^2`` FLOPs (Table 1's O(k n d^2)).
    """

    def __init__(self, d_model: int, k: int = 3):
        super().__init__()
        _check_kernel(d_model, k)
        self.conv = nn.Conv1d(d_model, d_model, k, padding=k // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, n, d) -> (B, d, n) and back


class SeparableConv1dLayer(nn.Module):
    """A depthwise-separable convolution over the sequence: ``(B, n, d) -> (B, n, d)``.

    Each channel has its own kernel of odd width ``k`` (``groups = d``: ``2 k n d``
    FLOPs), then one ``d x d`` map mixes the channels at each position (``2 n d^2``):
    O(k n d + n d^2), as in Section 4 of the paper. No biases.
    """

    def __init__(self, d_model: int, k: int = 3):
        super().__init__()
        _check_kernel(d_model, k)
        self.depthwise = nn.Conv1d(d_model, d_model, k, padding=k // 2, groups=d_model,
                                   bias=False)
        self.pointwise = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = self.depthwise(x.transpose(1, 2)).transpose(1, 2)  # (B, n, d): per channel
        return self.pointwise(mixed)  # (B, n, d): across channels
