"""aiayn.experiments.variance: the variance argument for 1/sqrt(d_k), the softmax Jacobian, the
attention reader of chapter 3, its task, plots and explorer (aiayn.figures.variance)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

import aiayn.figures.variance
from aiayn import scaled_dot_product_attention
from aiayn.experiments.variance import (
    AttentionReader,
    attention_gradient_norms,
    attention_score_rows,
    dot_product_moments,
    dot_product_samples,
    softmax_jacobian,
    softmax_stats,
    variance_with_se,
)
from aiayn.figures.variance import (
    plot_dot_product_variance,
    plot_scaling_training,
    plot_scaling_view,
)
from aiayn.learning.data import marked_token_task


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ the variance argument


@pytest.mark.parametrize("d_k", [1, 8, 64, 256])
def test_dot_product_variance_is_d_k(d_k):
    x = dot_product_samples(d_k, 10_000, gen(d_k))
    assert x.shape == (10_000,) and x.dtype == torch.float64
    variance, se = variance_with_se(x)
    assert abs(variance - d_k) < 4 * se
    assert abs(x.mean().item()) < 4 * math.sqrt(d_k / 10_000)
    scaled, scaled_se = variance_with_se(x / math.sqrt(d_k))
    assert abs(scaled - 1) < 4 * scaled_se


@pytest.mark.parametrize("kwargs", [
    dict(mean=0.5), dict(qk_corr=0.5), dict(qk_corr=-0.3), dict(qk_corr=1.0),
    dict(within_corr=0.2), dict(mean=0.3, qk_corr=0.4, within_corr=0.1),
])
def test_broken_assumptions_match_the_closed_form(kwargs):
    d_k, n = 32, 40_000
    x = dot_product_samples(d_k, n, gen(1), **kwargs)
    expected, variance = dot_product_moments(d_k, **kwargs)
    measured, se = variance_with_se(x)
    assert abs(measured - variance) < 4 * se, (measured, variance, se)
    assert abs(x.mean().item() - expected) < 4 * math.sqrt(variance / n)
    assert abs(variance / d_k - 1) > 0.05  # the assumption broke: no longer d_k


def test_dot_product_moments_closed_forms():
    assert dot_product_moments(64) == (0.0, 64.0)
    assert dot_product_moments(10, mean=1.0) == (10.0, 30.0)  # d_k (1 + 2 m^2)
    assert dot_product_moments(10, qk_corr=1.0) == (10.0, 20.0)  # |q|^2: chi-square
    # A common factor makes the variance grow like d_k^2.
    assert dot_product_moments(100, within_corr=0.5)[1] == pytest.approx(100 + 9900 * 0.25)


def test_samples_are_reproducible_and_chunked_draws_are_consistent():
    a = dot_product_samples(1024, 2500, gen(3))  # two chunks at d_k = 1024
    b = dot_product_samples(1024, 2500, gen(3))
    assert torch.equal(a, b)
    assert torch.isfinite(a).all()


def test_variance_with_se_matches_the_normal_formula():
    x = torch.randn(100_000, generator=gen(4), dtype=torch.float64) * 3
    variance, se = variance_with_se(x)
    assert variance == pytest.approx(x.var().item(), rel=1e-12)
    assert se == pytest.approx(9 * math.sqrt(2 / 100_000), rel=0.05)


@pytest.mark.parametrize("call,message", [
    (lambda: dot_product_samples(0, 10), "d_k must be a positive int, got 0"),
    (lambda: dot_product_samples(4, 2.5), "n_samples must be a positive int, got 2.5"),
    (lambda: dot_product_samples(4, 10, qk_corr=1.5), r"qk_corr must be in \[-1, 1\]"),
    (lambda: dot_product_samples(4, 10, within_corr=1.0), r"within_corr must be in \[0, 1\)"),
    (lambda: dot_product_moments(4, mean=math.inf), "mean must be a finite number"),
    (lambda: variance_with_se(torch.ones(3)), "at least 4 samples"),
    (lambda: variance_with_se(torch.ones(2, 5)), "x must have 1 dimensions"),
    (lambda: attention_score_rows(4, 0, 3), "n_rows must be a positive int"),
])
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------- the softmax


@pytest.mark.parametrize("n", [1, 2, 7])
def test_softmax_jacobian_matches_autograd(n):
    z = torch.randn(n, generator=gen(n), dtype=torch.float64) * 3
    ours = softmax_jacobian(z)
    theirs = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), z)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


def test_softmax_jacobian_is_batched():
    z = torch.randn(3, 4, 5, generator=gen(5), dtype=torch.float64)
    batched = softmax_jacobian(z)
    assert batched.shape == (3, 4, 5, 5)
    torch.testing.assert_close(batched[2, 1], softmax_jacobian(z[2, 1]))
    torch.testing.assert_close(batched.sum(-1), torch.zeros(3, 4, 5, dtype=torch.float64))


def test_softmax_stats_at_the_two_extremes():
    n = 8
    uniform = softmax_stats(torch.zeros(2, n, dtype=torch.float64))
    torch.testing.assert_close(uniform["max_weight"], torch.full((2,), 1 / n, dtype=torch.float64))
    torch.testing.assert_close(uniform["entropy"], torch.full((2,), math.log(n), dtype=torch.float64))
    torch.testing.assert_close(
        uniform["jacobian_norm"], torch.full((2,), math.sqrt(n - 1) / n, dtype=torch.float64)
    )
    saturated = softmax_stats(torch.tensor([[1000.0, 0.0, 0.0]], dtype=torch.float64))
    assert saturated["max_weight"].item() == 1.0
    assert saturated["entropy"].item() == 0.0  # 0 log 0 = 0, no NaN
    assert saturated["jacobian_norm"].item() == 0.0


def test_jacobian_norm_shrinks_as_the_scores_grow():
    z = torch.randn(2000, 16, generator=gen(6), dtype=torch.float64)
    # Past the peak (about 3 for 16 keys) the median norm falls fast towards 0.
    scales = (4, 8, 16, 32, 64)
    medians = [softmax_stats(s * z)["jacobian_norm"].median().item() for s in scales]
    assert all(a > b for a, b in zip(medians, medians[1:], strict=False))
    assert medians[-1] < 1e-6 < 0.1 < medians[0]


def test_gradient_into_a_score_is_bounded_by_its_weight():
    # Column j of the Jacobian is p_j (e_j - p): a key with weight ~0 learns ~nothing.
    z = torch.tensor([12.0, 0.0, -3.0, 5.0], dtype=torch.float64)
    p, jac = torch.softmax(z, -1), softmax_jacobian(z)
    assert torch.all(jac.norm(dim=0) <= math.sqrt(2) * p + 1e-15)


def test_attention_score_rows():
    raw = attention_score_rows(256, 400, 8, gen(7), scaled=False)
    scaled = attention_score_rows(256, 400, 8, gen(7))
    assert raw.shape == scaled.shape == (400, 8)
    torch.testing.assert_close(scaled, raw / 16)
    assert 0.9 < scaled.std().item() < 1.1


# -------------------------------------------------------------- the learning experiment


def test_marked_token_task():
    tokens, targets = marked_token_task(50, 7, 5, gen(8))
    assert tokens.shape == (50, 7) and targets.shape == (50,)
    assert tokens.dtype == targets.dtype == torch.int64
    marked = tokens >= 5
    assert torch.all(marked.sum(1) == 1)  # exactly one marked token per row
    assert torch.equal(tokens[marked] - 5, targets)
    assert tokens.max() < 10 and targets.max() < 5
    again, _ = marked_token_task(50, 7, 5, gen(8))
    assert torch.equal(tokens, again)
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        marked_token_task(2, 0, 5)


@pytest.mark.parametrize("scaled", [True, False])
def test_attention_reader_matches_eq_1(scaled):
    torch.manual_seed(0)
    model = AttentionReader(10, 8, 32, 5, scaled=scaled).double()
    tokens, _ = marked_token_task(4, 6, 5, gen(9))
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (4, 5) and weights.shape == (4, 6)
    x = model.embed(tokens)
    q = model.w_q(model.reader)
    scores = x @ model.w_k.weight.T @ q  # (B, T)
    expected = torch.softmax(scores / math.sqrt(32) if scaled else scores, -1)
    torch.testing.assert_close(weights, expected)
    assert torch.equal(model(tokens), logits)
    assert model.scale == (1 / math.sqrt(32) if scaled else 1.0)
    assert "scaled=" in repr(model)


def test_attention_reader_init_gives_unit_variance_components():
    torch.manual_seed(1)
    model = AttentionReader(64, 256, 512, 4)
    keys = model.w_k(model.embed.weight)  # (64, 512)
    assert 0.8 < keys.var().item() < 1.2
    assert abs(keys.mean().item()) < 0.1


def test_attention_reader_bad_arguments():
    with pytest.raises(ValueError, match="d_k must be a positive int, got 0"):
        AttentionReader(10, 8, 0, 5)
    with pytest.raises(TypeError, match="model must be an AttentionReader"):
        attention_gradient_norms(torch.nn.Linear(2, 2), torch.zeros(1, 2), torch.zeros(1))


def test_attention_gradient_norms_agree_with_backward():
    torch.manual_seed(2)
    model = AttentionReader(10, 8, 16, 5)
    tokens, targets = marked_token_task(16, 6, 5, gen(10))
    norms = attention_gradient_norms(model, tokens, targets)
    assert model.w_q.weight.grad is None  # left untouched
    F.cross_entropy(model(tokens), targets).backward()
    for name in ("w_q", "w_k", "w_v"):
        assert norms[name] == pytest.approx(getattr(model, name).weight.grad.norm().item())


def test_scaled_reader_learns_the_task_and_unscaled_lags():
    from aiayn.learning.training import fit

    # A tiny model: one thread is as fast, and immune to a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def train(scaled):
        torch.manual_seed(0)
        model = AttentionReader(16, 16, 256, 8, scaled=scaled)
        g = gen(11)
        opt = torch.optim.SGD(model.parameters(), lr=0.3)
        losses = fit(model, lambda _: marked_token_task(16, 8, 8, g), F.cross_entropy,
                     60, optimizer=opt)
        return sum(losses[-20:]) / 20

    try:
        assert train(True) < 0.5 * train(False)
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- plots and explorer


def test_plot_dot_product_variance():
    ax = plot_dot_product_variance([1, 2, 4], [1, 2, 4], [0.1] * 3, [1, 1, 1], [0.1] * 3)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="one entry per d_k"):
        plot_dot_product_variance([1, 2], [1], [0.1], [1], [0.1])


@pytest.mark.parametrize("d_k", [1, 1024])
@pytest.mark.parametrize("scaled", [True, False])
def test_plot_scaling_view_extremes(d_k, scaled):
    fig = plot_scaling_view(d_k, scaled, n_rows=200)
    assert isinstance(fig, Figure)
    jac = np.asarray(fig.axes[2].images[0].get_array())
    bars = [p.get_height() for p in fig.axes[1].patches]
    assert np.isfinite(jac).all() and np.isfinite(bars).all()
    assert sum(bars) == pytest.approx(1.0)


def test_plot_scaling_training_marks_diverged_runs():
    ax = plot_scaling_training({"ok": [3.0] * 30, "bad": [3.0] * 12 + [math.nan]},
                               chance=math.log(16))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["ok", "bad (diverged)", "chance"]
    with pytest.raises(ValueError, match="smooth must be a positive int"):
        plot_scaling_training({"a": [1.0]}, smooth=0)


def test_scaling_explorer_redraws_at_the_extremes(monkeypatch):
    pytest.importorskip("ipywidgets")
    from aiayn.figures.variance import scaling_explorer

    calls = []
    original = aiayn.figures.variance.plot_scaling_view

    def recording_view(d_k, scaled, **kwargs):
        fig = original(d_k, scaled, n_rows=100, **{k: v for k, v in kwargs.items()
                                                    if k != "n_rows"})
        jac = np.asarray(fig.axes[2].images[0].get_array())
        calls.append((d_k, scaled, bool(np.isfinite(jac).all())))
        return fig

    monkeypatch.setattr(aiayn.figures.variance, "plot_scaling_view", recording_view)
    box = scaling_explorer(twin=False)
    d_k, scaled = box.children[0].children
    assert calls == [(64, True, True)]
    assert (d_k.options[0], d_k.options[-1]) == (1, 1024)
    d_k.value = 1024
    scaled.value = False
    d_k.value = 1
    scaled.value = True
    assert calls[1:] == [(1024, True, True), (1024, False, True), (1, False, True),
                         (1, True, True)]
    assert len(plt.get_fignums()) <= 1
    # the opening setting: one of the slider's values, the first view drawn for it
    box = scaling_explorer(twin=False, d_k=1024, scaled=False)
    assert [c.value for c in box.children[0].children] == [1024, False]
    assert calls[-1] == (1024, False, True)
    with pytest.raises(ValueError, match=r"d_k must be one of \[1, 2, 4"):
        scaling_explorer(twin=False, d_k=100)
    with pytest.raises(ValueError, match="scaled must be True or False"):
        scaling_explorer(twin=False, scaled=1)


def test_reader_uses_the_package_attention():
    # The reader's weights are exactly aiayn.scaled_dot_product_attention's.
    torch.manual_seed(3)
    model = AttentionReader(10, 8, 16, 5, scaled=False).double()
    tokens, _ = marked_token_task(2, 5, 5, gen(12))
    _, weights = model(tokens, need_weights=True)
    x = model.embed(tokens)
    q = model.w_q(model.reader).expand(2, 1, 16)
    _, expected = scaled_dot_product_attention(q, model.w_k(x), model.w_v(x), scale=1.0)
    torch.testing.assert_close(weights, expected[:, 0])
