"""Measuring what Table 1 predicts (chapter 8): wall-clock
timing, power-law fits, FLOPs counted from what PyTorch runs, the critical path of a
computation, which outputs depend on which inputs, and peak memory.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .costs import _check_positive_int

__all__ = [
    "time_call",
    "time_stats",
    "fit_power_law",
    "critical_path_length",
    "crossing_point",
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
    layer of the chain do not wait for each other, so the count does not grow with the number
    of operations, only with their dependencies (Table 1's "sequential operations"). It counts
    an operation as one step whatever its size: a reduction inside it (a sum over ``d``
    terms, a softmax over ``n`` scores) takes about ``log`` of its length in parallel steps on
    parallel hardware, which the count leaves out. Run under
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
