"""aiayn.complexity: timing, power-law fits, and the critical-path count."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn import MultiHeadAttention
from aiayn.complexity import critical_path_length, fit_power_law, time_call
from aiayn.rnn import RNN


def test_time_call_counts_and_returns_the_median():
    calls = []

    def fn(a, b=0):
        calls.append((a, b))

    seconds = time_call(fn, 1, b=2, repeats=3, warmup=2)
    assert calls == [(1, 2)] * 5
    assert 0 <= seconds < 1
    assert time_call(lambda: sum(range(20000)), repeats=1, warmup=0) > 0
    for kwargs, message in ((dict(repeats=0), "repeats must be an int >= 1, got 0"),
                            (dict(warmup=-1), "warmup must be an int >= 0, got -1"),
                            (dict(repeats=2.0), "repeats must be an int >= 1, got 2.0")):
        with pytest.raises(ValueError, match=message):
            time_call(fn, 1, **kwargs)
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        time_call(3)


def test_fit_power_law():
    x = [16, 64, 256, 1024]
    slope, intercept = fit_power_law(x, [3.0 * v**2 for v in x])
    assert slope == pytest.approx(2.0, abs=1e-12) and intercept == pytest.approx(math.log(3.0))
    slope, _ = fit_power_law(torch.tensor([1.0, 2.0, 4.0]), [5.0, 5.0, 5.0])
    assert slope == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="equal length, got 3 and 2"):
        fit_power_law([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2 points"):
        fit_power_law([1], [1])
    with pytest.raises(ValueError, match="must be positive"):
        fit_power_law([1, 2], [0, 1])
    with pytest.raises(ValueError, match="at least two different values"):
        fit_power_law([2, 2], [1, 3])


def test_critical_path_length_small_graphs():
    x = torch.randn(4, 4)

    def chain(z, n):
        for _ in range(n):
            z = z + 1
        return z

    assert critical_path_length(chain, x, 5) == 5
    # Two independent branches, then one op joining them: 2, not 3.
    assert critical_path_length(lambda z: (z + 1) * (z * 2), x) == 2
    assert critical_path_length(lambda z: z.t()[1:].unsqueeze(0), x) == 0  # views only
    assert critical_path_length(lambda z: z.t().reshape(16), x) >= 1  # a copy, not a view
    assert critical_path_length(lambda z: torch.tanh(z.t()) @ z, x) == 2
    with pytest.raises(TypeError, match="fn must be callable, got Tensor"):
        critical_path_length(x)


def test_critical_path_recurrence_against_attention():
    torch.manual_seed(0)
    rnn, mha = RNN(8, 8), MultiHeadAttention(8, 2)
    depth_rnn, depth_attn = {}, {}
    with torch.no_grad():
        for n in (4, 8, 16):
            x = torch.randn(1, n, 8)
            depth_rnn[n] = critical_path_length(rnn, x)
            depth_attn[n] = critical_path_length(lambda z: mha(z, z, z, need_weights=True), x)
    # Three dependent operations per step (W_hh h, + W_xh x_t + b, tanh): n steps.
    assert depth_rnn[8] - depth_rnn[4] == 3 * 4 and depth_rnn[16] - depth_rnn[8] == 3 * 8
    assert len(set(depth_attn.values())) == 1 and depth_attn[4] < depth_rnn[4]
