"""Measuring cost: wall-clock timing, power-law fits, and the length of the longest chain
of dependent operations (the "sequential operations" column of the paper's Table 1).

Timings depend on the machine; the chain length does not: it is a property of the
computation, counted by recording every operation PyTorch executes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["time_call", "fit_power_law", "critical_path_length"]


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
