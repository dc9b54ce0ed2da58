import pytest
import torch
from torch import nn

from aiayn.train import fit


def _regression_batch(step: int):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 3, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]])


def test_fit_learns_a_linear_map_and_returns_one_loss_per_step():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    losses = fit(model, _regression_batch, nn.functional.mse_loss, n_steps=300, lr=0.05)
    assert len(losses) == 300
    assert losses[-1] < 1e-3 < losses[0]
    assert not model.training  # left in eval mode


def test_fit_rejects_bad_arguments():
    model = nn.Linear(3, 1)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        fit(model, _regression_batch, nn.functional.mse_loss, n_steps=0)
    with pytest.raises(ValueError, match="lr must be positive"):
        fit(model, _regression_batch, nn.functional.mse_loss, n_steps=1, lr=0.0)


def test_fit_stops_on_a_non_finite_loss():
    model = nn.Linear(3, 1)

    def nan_loss(output, target):
        return (output * float("nan")).sum()

    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        fit(model, _regression_batch, nan_loss, n_steps=5)
