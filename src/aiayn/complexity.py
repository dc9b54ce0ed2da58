"""Measuring cost: the paper's Table 1 (Section 4), as formulas and as measurements.

* :func:`time_call`, :func:`fit_power_law` and :func:`critical_path_length`: wall-clock
  timing, slopes on log-log axes, and the length of the longest chain of dependent
  operations (the "sequential operations" column of Table 1).
* :func:`layer_cost` and :func:`crossover_length`: the columns of Table 1 for
  self-attention, recurrent, convolutional and restricted self-attention layers (and the
  separable convolution of Section 4's text), as exact FLOP counts (a multiply-add =
  2 FLOPs), and where two layers cost the same.
* :func:`encoder_layer_flops` and :func:`quadratic_half_length`: a whole encoder layer's
  FLOPs by part, and the ``n`` from which attention's ``n^2`` terms are the larger half.
* :class:`Conv1dLayer`, :class:`SeparableConv1dLayer`, :func:`attention_core`,
  :func:`restricted_attention_core` and :func:`recurrent_core`: the smallest layers that
  compute what each row counts, to check the formulas against ``FlopCounterMode``
  (:func:`count_flops`).
* :func:`hops_to_connect`: the "maximum path length" column, read off the gradient's
  sparsity pattern.
* :func:`saved_tensor_bytes` and :func:`peak_memory_bytes`: what a layer stores.

Timings depend on the machine; FLOPs, chain lengths and saved bytes do not.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

__all__ = [
    "time_call",
    "time_stats",
    "fit_power_law",
    "critical_path_length",
    "LAYER_KINDS",
    "ALL_LAYER_KINDS",
    "LayerCost",
    "layer_cost",
    "crossover_length",
    "encoder_layer_flops",
    "quadratic_half_length",
    "crossing_point",
    "attention_core",
    "restricted_attention_core",
    "recurrent_core",
    "Conv1dLayer",
    "SeparableConv1dLayer",
    "count_flops",
    "dependency_matrix",
    "hops_to_connect",
    "saved_tensor_bytes",
    "peak_memory_bytes",
]


def _synchronize() -> None:
    """Wait for queued GPU work, so a timer measures the computation, not its launch."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    mps = getattr(torch, "mps", None)
    if mps is not None and torch.backends.mps.is_available():
        mps.synchronize()


def time_call(
    fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1, **kwargs: Any
) -> float:
    """Median wall-clock seconds of ``fn(*args, **kwargs)`` over ``repeats`` calls.

    ``warmup`` calls run first and are not timed (caches, lazy initialisation, kernel
    selection). The median, not the mean, so one interrupted call does not move it.
    """
    for name, value, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for _ in range(warmup):
        fn(*args, **kwargs)
    _synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        _synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through ``(ln x, ln y)``: returns ``(slope, intercept)``.

    ``y ~ exp(intercept) * x**slope``: a slope of 1 is linear growth, 2 quadratic.
    """
    xs = torch.as_tensor(list(x), dtype=torch.float64)
    ys = torch.as_tensor(list(y), dtype=torch.float64)
    if xs.dim() != 1 or xs.shape != ys.shape:
        raise ValueError(
            f"x and y must be 1-D sequences of equal length, got {len(xs)} and {len(ys)}"
        )
    if len(xs) < 2:
        raise ValueError(f"need at least 2 points to fit a line, got {len(xs)}")
    if not (torch.all(xs > 0) and torch.all(ys > 0)):
        raise ValueError("x and y must be positive (their logarithms are fitted)")
    lx, ly = xs.log(), ys.log()
    lx_c = lx - lx.mean()
    if torch.all(lx_c == 0):
        raise ValueError("x must hold at least two different values")
    slope = ((lx_c * (ly - ly.mean())).sum() / (lx_c * lx_c).sum()).item()
    intercept = (ly.mean() - slope * lx.mean()).item()
    if not (math.isfinite(slope) and math.isfinite(intercept)):
        raise ValueError("the fit is not finite")
    return slope, intercept


# Views whose schema does not say so (they alias their input all the same).
_UNDECLARED_VIEWS = {"_unsafe_view", "_reshape_alias"}


def _is_view(func: torch._ops.OpOverload) -> bool:
    """A view returns an alias of its input: it reshapes metadata and computes nothing."""
    if func._schema.name.removeprefix("aten::") in _UNDECLARED_VIEWS:
        return True
    return any(
        r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns
    )


class _DepthMode(TorchDispatchMode):
    """Gives every tensor an operation produces a depth: 1 + the largest depth among the
    operation's tensor inputs (views add nothing). Inputs and parameters have depth 0."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = WeakIdKeyDictionary()
        self.max_depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        deepest = max((self.depth.get(t, 0) for t in inputs), default=0)
        depth = deepest if _is_view(func) else deepest + 1
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.depth[t] = depth
        self.max_depth = max(self.max_depth, depth)
        return out


def critical_path_length(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Length of the longest chain of dependent operations in ``fn(*args, **kwargs)``.

    Every PyTorch operation is recorded (at the ATen level, after autograd); an operation
    adds 1 to the longest chain among its inputs, views add 0. Operations in the same
    layer of the chain do not wait for each other, so with enough parallel hardware the
    run takes this many steps however many operations there are. Run under
    ``torch.no_grad()`` to count the forward pass only.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    mode = _DepthMode()
    with mode:
        fn(*args, **kwargs)
    return mode.max_depth


def time_stats(
    fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1, **kwargs: Any
) -> tuple[float, float, float]:
    """``(median, min, max)`` wall-clock seconds of ``repeats`` calls after ``warmup``.

    Like :func:`time_call`, with the spread, for the benchmarks' tables.
    """
    times: list[float] = []

    def timed() -> None:
        start = time.perf_counter()
        fn(*args, **kwargs)
        _synchronize()
        times.append(time.perf_counter() - start)

    time_call(timed, repeats=repeats, warmup=warmup)
    times = times[warmup:]
    return statistics.median(times), min(times), max(times)


# ------------------------------------------------------------------------------ Table 1

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


# ---------------------------------------------------- the layers that Table 1 counts


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
    :func:`hops_to_connect`). ``x``: ``(B, n, d)``; returns ``(B, n, d)``.
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


class Conv1dLayer(nn.Module):
    """A convolutional layer over the sequence, batch-first: ``(B, n, d) -> (B, n, d)``.

    ``d`` channels in and out, an odd kernel ``k`` centred on each position (zero
    padding keeps the length), no bias: ``2 k n d^2`` FLOPs (Table 1's O(k n d^2)).
    """

    def __init__(self, d_model: int, k: int = 3):
        super().__init__()
        _check_positive_int("d_model", d_model)
        _check_positive_int("k", k)
        if k % 2 == 0:
            raise ValueError(f"k must be odd (a kernel centred on the position), got {k}")
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
        _check_positive_int("d_model", d_model)
        _check_positive_int("k", k)
        if k % 2 == 0:
            raise ValueError(f"k must be odd (a kernel centred on the position), got {k}")
        self.depthwise = nn.Conv1d(d_model, d_model, k, padding=k // 2, groups=d_model,
                                   bias=False)
        self.pointwise = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = self.depthwise(x.transpose(1, 2)).transpose(1, 2)  # (B, n, d): per channel
        return self.pointwise(mixed)  # (B, n, d): across channels


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of the matrix products and convolutions that ``fn(*args, **kwargs)`` runs,
    counted by ``torch.utils.flop_counter.FlopCounterMode`` (element-wise work such as
    softmax and tanh is not counted, nor is Table 1)."""
    from torch.utils.flop_counter import FlopCounterMode

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


# ---------------------------------------------------------------- maximum path length


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Boolean ``(n, n)``: entry ``[i, j]`` is True when output position ``i`` of
    ``fn(x)`` depends on input position ``j`` (some entry of ``d out_i / d x_j`` is
    non-zero). ``x``: ``(1, n, d)``; ``fn`` maps it to ``(1, n, d_out)``."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[0] != 1:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (1, n, d), got {shape}")
    jac = torch.autograd.functional.jacobian(fn, x)  # (1, n, d_out, 1, n, d)
    return jac[0, :, :, 0].abs().sum(dim=(1, 3)) > 0  # (n, d_out, n, d) -> (n, n)


def hops_to_connect(
    fn: Callable[[torch.Tensor, int], torch.Tensor], x: torch.Tensor, max_hops: int
) -> torch.Tensor:
    """``(n, n)`` int: the fewest hops after which output ``i`` depends on input ``j``
    (0 where ``max_hops`` do not connect them). ``fn(x, hops)`` runs ``hops`` stacked
    layers (or, for a recurrence, lets it reach ``hops`` steps back).

    The maximum over the matrix is Table 1's "maximum path length", measured from the
    sparsity of the gradient rather than stated.
    """
    _check_positive_int("max_hops", max_hops)
    n = x.shape[1]
    hops = torch.zeros(n, n, dtype=torch.long)
    for h in range(1, max_hops + 1):
        reached = dependency_matrix(lambda z, h=h: fn(z, h), x)
        hops[reached & (hops == 0)] = h
        if bool((hops > 0).all()):
            break
    return hops


# ------------------------------------------------------------------------------ memory


def saved_tensor_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Bytes of the tensors autograd saves for the backward pass of ``fn(*args, **kwargs)``.

    Counted with ``torch.autograd.graph.saved_tensors_hooks``; each storage once, so a
    tensor saved by two operations (or two views of it) counts once. Parameters count
    too. This is what training keeps per layer, and does not depend on the machine.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return sum(seen.values())


class _LiveBytesMode(TorchDispatchMode):
    """Tracks the bytes of tensors that operations allocate and still alive, and the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not _is_view(func) and not any(
            r.alias_info is not None for r in func._schema.returns
        ):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    nbytes = t.untyped_storage().nbytes()
                    self.live += nbytes
                    weakref.finalize(t, self._free, nbytes)
            self.peak = max(self.peak, self.live)
        return out


def peak_memory_bytes(fn: Callable[..., Any], *args: Any, device: str | torch.device = "cpu",
                      **kwargs: Any) -> int:
    """Peak bytes allocated while ``fn(*args, **kwargs)`` runs, above what was allocated
    before (inputs and parameters are not counted).

    On CUDA: ``torch.cuda.max_memory_allocated``. Elsewhere: every tensor an operation
    creates is counted until it is freed (a dispatch mode, the equivalent of
    ``tracemalloc`` for tensors); a kernel's internal scratch space is not seen.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    mode = _LiveBytesMode()
    with mode:
        fn(*args, **kwargs)
    return int(mode.peak)


def crossing_point(x: Sequence[float], a: Sequence[float], b: Sequence[float]) -> float | None:
    """The first ``x`` where curve ``a`` overtakes curve ``b`` (``a < b`` before,
    ``a >= b`` after), interpolated on log-log axes; None if it never does in range."""
    xs, ya, yb = (torch.as_tensor(list(v), dtype=torch.float64) for v in (x, a, b))
    if not (xs.shape == ya.shape == yb.shape) or xs.dim() != 1:
        raise ValueError("x, a and b must be 1-D sequences of equal length")
    if not (torch.all(xs > 0) and torch.all(ya > 0) and torch.all(yb > 0)):
        raise ValueError("x, a and b must be positive (their logarithms are interpolated)")
    gap = ya.log() - yb.log()  # < 0 while a is below b
    for i in range(1, len(xs)):
        if gap[i - 1] < 0 <= gap[i]:
            t = (-gap[i - 1] / (gap[i] - gap[i - 1])).item()
            return math.exp(math.log(xs[i - 1]) + t * (math.log(xs[i]) - math.log(xs[i - 1])))
    return None
