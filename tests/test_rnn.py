"""aiayn.experiments.recurrence: the recurrent layer against torch.nn.RNN, the gradient measurements of
chapter 1, the recall readers; the recall task (aiayn.learning.data); the chapter's plot and
explorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_parity
from torch import nn

import aiayn.figures.recurrence
from aiayn import MultiHeadAttention
from aiayn.experiments.recurrence import (
    RNN,
    AttentionReader,
    LSTMReader,
    RNNReader,
    fit_geometric_rate,
    gradient_decay,
    greedy_generate,
    hidden_gradient_log_norms,
    input_gradient_norms,
    random_rnn,
    scale_to_spectral_radius,
    spectral_radius,
)
from aiayn.learning.data import recall_task

B, T, D_IN, D = 3, 7, 5, 6


def randomized_pair(dtype, seed=0, nonlinearity="tanh"):
    """Our layer with random weights and a bias, and torch.nn.RNN holding the same
    (torch's second bias is zero, since ours has one bias b = bias_ih + bias_hh)."""
    torch.manual_seed(seed)
    ours = RNN(D_IN, D, nonlinearity=nonlinearity).to(dtype)
    theirs = nn.RNN(D_IN, D, nonlinearity=nonlinearity, batch_first=True).to(dtype)
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, 0.5)
        theirs.weight_ih_l0.copy_(ours.w_xh.weight)
        theirs.bias_ih_l0.copy_(ours.w_xh.bias)
        theirs.weight_hh_l0.copy_(ours.w_hh.weight)
        theirs.bias_hh_l0.zero_()
    return ours, theirs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_h0", [False, True])
def test_rnn_matches_torch(dtype, with_h0):
    ours, theirs = randomized_pair(dtype)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, D_IN, generator=gen, dtype=torch.float64).to(dtype)
    h0 = torch.randn(B, D, generator=gen, dtype=torch.float64).to(dtype) if with_h0 else None
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    h0s = [h0.clone().requires_grad_(True) if with_h0 else None for _ in range(2)]
    out_a, h_a = ours(xs[0], h0s[0])
    out_b, h_b = theirs(xs[1], None if h0s[1] is None else h0s[1][None])
    assert_parity(out_a, out_b, "outputs")
    assert_parity(h_a, h_b[0], "h_n")
    assert_parity(h_a, out_a[:, -1], "h_n is the last output")
    cot = torch.randn(B, T, D, generator=gen, dtype=torch.float64).to(dtype) / math.sqrt(B * T)
    ((out_a * cot).sum() + h_a.sum()).backward()
    ((out_b * cot).sum() + h_b.sum()).backward()
    assert_parity(xs[0].grad, xs[1].grad, "d/dx")
    if with_h0:
        assert_parity(h0s[0].grad, h0s[1].grad, "d/dh0")
    assert_parity(ours.w_xh.weight.grad, theirs.weight_ih_l0.grad, "d/dW_xh")
    assert_parity(ours.w_hh.weight.grad, theirs.weight_hh_l0.grad, "d/dW_hh")
    assert_parity(ours.w_xh.bias.grad, theirs.bias_ih_l0.grad, "d/db")
    assert_parity(ours.w_xh.bias.grad, theirs.bias_hh_l0.grad, "d/db (torch's 2nd bias)")


def test_rnn_relu_matches_torch():
    ours, theirs = randomized_pair(torch.float64, nonlinearity="relu")
    x = torch.randn(B, T, D_IN, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert_parity(ours(x)[0], theirs(x)[0], "outputs (relu)")


def test_rnn_identity_is_the_linear_recurrence():
    torch.manual_seed(0)
    ours = RNN(D_IN, D, nonlinearity="identity").double()
    x = torch.randn(B, T, D_IN, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    h, expected = torch.zeros(B, D, dtype=torch.float64), []
    for t in range(T):  # h_t = W_hh h_{t-1} + W_xh x_t + b, nothing else
        h = h @ ours.w_hh.weight.T + x[:, t] @ ours.w_xh.weight.T + ours.w_xh.bias
        expected.append(h)
    torch.testing.assert_close(ours(x)[0], torch.stack(expected, 1), atol=1e-12, rtol=0)
    assert "nonlinearity='identity'" in repr(ours)
    with pytest.raises(ValueError, match=r"nonlinearity must be one of \['identity', 'relu', 'tanh'\], got 'sigmoid'"):
        RNN(D_IN, D, nonlinearity="sigmoid")


def test_rnn_step_and_init():
    ours, _ = randomized_pair(torch.float64)
    x = torch.randn(B, 1, D_IN, dtype=torch.float64)
    h0 = torch.randn(B, D, dtype=torch.float64)
    out, h = ours(x, h0)
    assert torch.equal(ours.step(x[:, 0], h0), h)
    torch.manual_seed(0)
    fresh = RNN(D_IN, D, bias=False)
    assert fresh.w_xh.bias is None
    bound = 1 / math.sqrt(D)
    assert all(p.abs().max() <= bound for p in fresh.parameters())
    assert "d_input=5, d_model=6" in repr(fresh)


def test_rnn_bad_input():
    layer = RNN(D_IN, D)
    with pytest.raises(ValueError, match="d_input must be a positive int, got 0"):
        RNN(0, D)
    with pytest.raises(ValueError, match="d_model must be a positive int, got 2.5"):
        RNN(D_IN, 2.5)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        layer([[1.0]])
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer(torch.ones(B, T, D_IN, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions, got shape \(7, 5\)"):
        layer(torch.randn(T, D_IN))
    with pytest.raises(ValueError, match=r"x must have d_input=5 features, got shape \(3, 7, 4\)"):
        layer(torch.randn(B, T, 4))
    with pytest.raises(ValueError, match="x must not be empty"):
        layer(torch.randn(B, 0, D_IN))
    with pytest.raises(ValueError, match=r"h0 must have 2 dimensions, got shape \(1, 3, 6\)"):
        layer(torch.randn(B, T, D_IN), torch.randn(1, B, D))  # torch.nn.RNN's layout
    with pytest.raises(ValueError, match=r"h0 must have shape \(batch, d_model\) = \(3, 6\), got \(2, 6\)"):
        layer(torch.randn(B, T, D_IN), torch.randn(2, D))


# ------------------------------------------------------------------ gradients vs distance


def test_spectral_radius_and_rescaling():
    w = torch.tensor([[0.0, 2.0], [-2.0, 0.0]])  # eigenvalues +-2i
    assert spectral_radius(w) == pytest.approx(2.0)
    assert spectral_radius(scale_to_spectral_radius(w, 0.7)) == pytest.approx(0.7)
    with pytest.raises(ValueError, match=r"weight must be square, got shape \(2, 3\)"):
        spectral_radius(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="radius must be a positive finite number, got 0"):
        scale_to_spectral_radius(w, 0)
    with pytest.raises(ValueError, match="spectral radius 0"):
        scale_to_spectral_radius(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), 1.0)
    layer = random_rnn(16, 1.3, seed=2)
    assert spectral_radius(layer.w_hh.weight) == pytest.approx(1.3, rel=1e-10)
    assert layer.w_hh.weight.dtype == torch.float64 and torch.all(layer.w_xh.bias == 0)
    assert torch.equal(random_rnn(16, 1.3, seed=2).w_hh.weight, layer.w_hh.weight)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu", "identity"])
def test_hidden_gradient_log_norms_match_autograd(nonlinearity):
    """The Jacobians use the layer's own derivative: a layer built with another
    nonlinearity gets its own gradient, not tanh's."""
    layer = random_rnn(D, 1.2, seed=3, nonlinearity=nonlinearity)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, T, D, generator=gen, dtype=torch.float64)
    u = torch.randn(2, D, generator=gen, dtype=torch.float64)
    ours = hidden_gradient_log_norms(layer, x, cotangent=u)
    assert ours.shape == (2, T + 1)
    # autograd: L = u_hat . h_n, gradients of every hidden state h_0 .. h_n.
    h0 = torch.zeros(2, D, dtype=torch.float64, requires_grad=True)
    states, h = [h0], h0
    xw = layer.w_xh(x)
    for t in range(T):
        h = layer.f(xw[:, t] + layer.w_hh(h))
        h.retain_grad()
        states.append(h)
    (u / u.norm(dim=-1, keepdim=True) * h).sum().backward()
    expected = torch.stack([s.grad.norm(dim=-1).log() for s in reversed(states)], dim=1)
    torch.testing.assert_close(ours, expected, atol=1e-10, rtol=0)


def test_hidden_gradient_log_norms_linear_regime():
    """No input, h_0 = 0: h stays 0, the Jacobians are exactly W_hh, and for a scaled
    orthogonal W_hh every gradient norm is radius**k."""
    d, radius = 8, 0.8
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64))
    layer = RNN(d, d).double()
    with torch.no_grad():
        layer.w_hh.weight.copy_(radius * q)
        layer.w_xh.bias.zero_()
    log_norms = hidden_gradient_log_norms(layer, torch.zeros(1, 500, d, dtype=torch.float64))
    k = torch.arange(501, dtype=torch.float64)
    torch.testing.assert_close(log_norms[0], k * math.log(radius), atol=1e-9, rtol=0)
    assert fit_geometric_rate(log_norms) == pytest.approx(radius, rel=1e-10)
    with pytest.raises(ValueError, match=r"cotangent must have shape \(batch, d_model\) = \(1, 8\)"):
        hidden_gradient_log_norms(layer, torch.zeros(1, 3, d, dtype=torch.float64),
                                  cotangent=torch.ones(8))


def test_gradient_decay_rate_below_the_radius():
    for radius in (0.5, 0.9):
        rate = fit_geometric_rate(gradient_decay(radius, 60, d_model=32), start=10)
        assert 0.9 * radius < rate < radius  # saturation pulls it below, not far below
    strong = fit_geometric_rate(gradient_decay(0.9, 60, d_model=32, input_std=1.0), start=10)
    assert strong < 0.8  # saturated units shrink the Jacobian
    long = gradient_decay(2.5, 300, d_model=16, burn_in=0)
    assert long.shape == (301,) and torch.isfinite(long).all()
    with pytest.raises(ValueError, match="input_std must be a finite number >= 0"):
        gradient_decay(0.9, 10, input_std=-1.0)
    with pytest.raises(ValueError, match="burn_in must be an int >= 0, got -1"):
        gradient_decay(0.9, 10, burn_in=-1)
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        gradient_decay(0.9, 0)


def test_a_linear_layer_has_the_spectral_radius_as_its_rate():
    """Without a nonlinearity the Jacobian is W_hh at every step: the rate tends to rho."""
    for radius in (0.9, 2.0):
        log_norms = gradient_decay(radius, 100, input_std=0.1, nonlinearity="identity")
        assert fit_geometric_rate(log_norms, start=10) == pytest.approx(radius, rel=0.02)


def test_fit_geometric_rate():
    k = torch.arange(20, dtype=torch.float64)
    assert fit_geometric_rate(3.0 + k * math.log(0.7)) == pytest.approx(0.7, rel=1e-12)
    batch = torch.stack([k * math.log(0.5), k * math.log(2.0)])  # geometric mean: rate 1
    assert fit_geometric_rate(batch) == pytest.approx(1.0, rel=1e-12)
    assert fit_geometric_rate(torch.cat([k[:5] * 9, k * 0.0]), start=5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="need at least 2 distances from start=19"):
        fit_geometric_rate(k, start=19)


def test_input_gradient_norms():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    norms = input_gradient_norms(lambda z: mha(z, z, z), x, position=2)
    assert norms.shape == (5,)
    jac = torch.autograd.functional.jacobian(lambda z: mha(z, z, z)[0, 2], x)  # (8, 1, 5, 8)
    for t in range(5):
        expected = torch.linalg.svdvals(jac[:, 0, t, :])[0]
        assert norms[t].item() == pytest.approx(expected.item(), rel=1e-10)
    # A recurrent layer's state h_2 does not depend on later inputs.
    layer = random_rnn(8, 0.9)
    rnn_norms = input_gradient_norms(lambda z: layer(z)[0], x, position=2)
    assert torch.all(rnn_norms[3:] == 0) and torch.all(rnn_norms[:3] > 0)
    with pytest.raises(ValueError, match=r"x must hold one sequence, shape \(1, T, D\)"):
        input_gradient_norms(lambda z: z, torch.zeros(2, 5, 8))


# ------------------------------------------------------------------------ recall task


def test_recall_task():
    gen = torch.Generator().manual_seed(0)
    tokens, targets, offsets = recall_task(50, 12, 4, 12, generator=gen)
    assert tokens.shape == (50, 13) and targets.shape == (50,) and offsets.shape == (50,)
    assert tokens[:, :12].max() < 4 and targets.max() < 4
    assert torch.equal(tokens[:, 12], 4 + offsets - 1)  # the question token names k
    assert offsets.min() >= 1 and offsets.max() <= 12
    for row, target, k in zip(tokens, targets, offsets, strict=True):
        assert row[12 - k] == target
    again = recall_task(50, 12, 4, 12, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], tokens)
    with pytest.raises(ValueError, match=r"max_offset \(9\) must be at most seq_len \(8\)"):
        recall_task(2, 8, 4, 9)
    with pytest.raises(ValueError, match="n_symbols must be a positive int, got 0"):
        recall_task(2, 8, 0, 3)


def test_readers():
    torch.manual_seed(0)
    vocab, classes = 4 + 6, 4
    tokens, _, _ = recall_task(3, 6, 4, 6, generator=torch.Generator().manual_seed(1))
    rnn = RNNReader(vocab, 16, classes)
    assert rnn(tokens).shape == (3, classes)
    for positional in ("sinusoidal", "learned", "none"):
        attn = AttentionReader(vocab, 16, classes, n_heads=2, max_len=32, positional=positional)
        assert attn(tokens).shape == (3, classes)
    # Without positions attention cannot see order: shuffling the symbols changes nothing.
    shuffled = torch.cat([tokens[:, :-1].flip(1), tokens[:, -1:]], dim=1)
    torch.testing.assert_close(attn(shuffled), attn(tokens))
    with_pe = AttentionReader(vocab, 16, classes, max_len=32)
    assert not torch.allclose(with_pe(shuffled), with_pe(tokens))
    with pytest.raises(ValueError, match="positional must be 'sinusoidal', 'learned' or 'none'"):
        AttentionReader(vocab, 16, classes, positional="rotary")
    with pytest.raises(ValueError, match=r"tokens holds token ids in \[0, 10\]"):
        rnn(torch.tensor([[0, 10]]))
    with pytest.raises(ValueError, match="tokens has length 40, longer than max_len=32"):
        with_pe(torch.zeros(1, 40, dtype=torch.long))


def test_attention_reader_weights_are_the_questions_row():
    torch.manual_seed(0)
    tokens, _, _ = recall_task(3, 6, 4, 6, generator=torch.Generator().manual_seed(1))
    model = AttentionReader(10, 16, 4, n_heads=2, max_len=32)
    weights = model.attention_weights(tokens)
    assert weights.shape == (3, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    # the heads' mean of the last query's row of the layer's own weights
    x = model.position(model.embed(tokens))
    _, full = model.attn(x, x, x, need_weights=True)  # (B, H, T, T)
    torch.testing.assert_close(weights, full[:, :, -1].mean(1))
    with pytest.raises(ValueError, match="tokens has length 40, longer than max_len=32"):
        model.attention_weights(torch.zeros(1, 40, dtype=torch.long))


def test_lstm_reader_reads_the_last_hidden_state():
    torch.manual_seed(0)
    vocab, d, classes = 10, 8, 4
    model = LSTMReader(vocab, d, classes).double()
    tokens, _, _ = recall_task(3, 6, 4, 6, generator=torch.Generator().manual_seed(1))
    assert model(tokens).shape == (3, classes)
    # The LSTM equations by hand (gates in torch's order i, f, g, o), then the read-out.
    lstm = model.lstm
    x = model.embed(tokens)  # (B, T, d)
    h = c = x.new_zeros(3, d)
    for t in range(tokens.shape[1]):
        gates = x[:, t] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0
        gates = gates + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    torch.testing.assert_close(model(tokens), model.readout(h), rtol=0, atol=1e-12)
    # Three gates and a candidate state: four blocks of recurrent weights and biases.
    recurrent = sum(p.numel() for p in lstm.parameters())
    assert recurrent == 4 * (2 * d * d + 2 * d)
    with pytest.raises(ValueError, match=r"expected ids in \[0, 9\]"):
        model(torch.tensor([[0, 10]]))
    with pytest.raises(ValueError, match="d_model must be a positive int, got 0"):
        LSTMReader(vocab, 0, classes)


def test_generation_with_state_equals_rereading():
    torch.manual_seed(0)
    model = RNNReader(8, 16, 8)
    prompt = torch.randint(8, (2, 5))
    with torch.no_grad():
        fast = model.generate(prompt, 6)
        slow = greedy_generate(model, prompt, 6)
    assert fast.shape == (2, 11) and torch.equal(fast, slow)
    with pytest.raises(ValueError, match="n_tokens must be a positive int, got 0"):
        greedy_generate(model, prompt, 0)


# --------------------------------------------------------------------- plot and explorer


def test_plot_gradient_decay():
    ax = aiayn.figures.recurrence.plot_gradient_decay([0.5, 2.0], length=40, d_model=16)
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert len(solid) == 3  # two curves and the line at 1
    for line in solid[:2]:
        assert np.isfinite(line.get_ydata()).all()
    assert solid[0].get_ydata()[-1] < 1e-9 < 1 < solid[1].get_ydata()[-1]
    assert "rate" in ax.get_legend().get_texts()[0].get_text()
    with pytest.raises(ValueError, match="radii must hold at least one spectral radius"):
        aiayn.figures.recurrence.plot_gradient_decay([])


def test_gradient_decay_explorer_extremes(monkeypatch):
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    from aiayn.figures.recurrence import gradient_decay_explorer

    calls = []
    original = aiayn.figures.recurrence.plot_gradient_decay

    def recording(radii, length, *args, **kwargs):
        ax = original(radii, length, *args, **kwargs)
        calls.append((radii[0], length, np.isfinite(ax.get_lines()[0].get_ydata()).all()))
        return ax

    monkeypatch.setattr(aiayn.figures.recurrence, "plot_gradient_decay", recording)
    box = gradient_decay_explorer(d_model=16, twin=False)
    radius, length = box.children[0].children
    for r, n in ((radius.min, length.min), (radius.min, length.max),
                 (radius.max, length.max), (radius.max, length.min)):
        radius.value, length.value = r, n
    assert calls[0][:2] == (pytest.approx(0.9), 100)
    assert {(round(r, 2), n) for r, n, _ in calls[1:]} >= {(0.3, 10), (0.3, 300), (2.5, 300), (2.5, 10)}
    assert all(finite for *_, finite in calls)
    assert len(plt.get_fignums()) <= 1
