"""Training: a small, readable loop the chapters share.

Later chapters add the paper's pieces (label smoothing, the warm-up schedule); the
loop itself stays this short.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["fit"]

Batch = tuple[torch.Tensor, torch.Tensor]


def fit(
    model: nn.Module,
    make_batch: Callable[[int], Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    n_steps: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    progress: bool = False,
) -> list[float]:
    """Train ``model`` for ``n_steps`` steps and return the loss of each step.

    Args:
        model: any module; it is put in training mode.
        make_batch: ``make_batch(step) -> (inputs, targets)``, already on the model's device.
        loss_fn: ``loss_fn(model(inputs), targets) -> scalar``.
        n_steps: number of optimizer steps.
        lr: learning rate of the default optimizer, Adam.
        optimizer: use this one instead of Adam.
        progress: show a tqdm progress bar.
    """
    if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    if optimizer is None:
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = range(n_steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="training", leave=False)
    model.train()
    losses = []
    for step in steps:
        inputs, targets = make_batch(step)
        loss = loss_fn(model(inputs), targets)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses
