"""Chapter 2's plots and explorer (aiayn.figures.attention), on the Agg backend."""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

import aiayn.figures.attention
from aiayn.figures.attention import plot_attention, plot_attention_view, plot_weight_bars
from aiayn.figures.style import use_book_style

TOKENS = ["the", "cat", "sat", "down"]


def qkv(n=4, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, d, generator=gen) for _ in range(3))


def test_backend_is_agg():
    assert matplotlib.get_backend().lower() == "agg"


def test_use_book_style():
    use_book_style()
    assert plt.rcParams["axes.spines.top"] is False
    assert plt.rcParams["figure.constrained_layout.use"] is True


@pytest.mark.parametrize("as_tensor", [True, False])
def test_plot_attention_returns_axes(as_tensor):
    weights = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(1)), -1)
    data = weights if as_tensor else weights.numpy()
    ax = plot_attention(data, ["a", "b", "c"], TOKENS, title="t")
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert ax.get_title() == "t"
    assert len(ax.texts) == 12  # annotated cells
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy(), rtol=1e-6)


def test_plot_attention_uses_the_given_ax_and_default_labels():
    fig, ax = plt.subplots()
    out = plot_attention(np.eye(3), ax=ax, annotate=False)
    assert out is ax and out.figure is fig
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2"]
    assert len(ax.texts) == 0
    # A tensor that requires grad (or lives on another device) is accepted as is.
    plot_attention(torch.eye(2, requires_grad=True), ax=plt.subplots()[1])


def test_plot_attention_bad_shapes():
    with pytest.raises(ValueError, match=r"weights must be a 2-D \(queries, keys\) matrix, got shape \(2, 3, 3\)"):
        plot_attention(np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"weights must be a 2-D"):
        plot_attention(torch.zeros(3))
    with pytest.raises(ValueError, match=r"got 2 row and 4 column labels for weights of shape \(3, 4\)"):
        plot_attention(np.zeros((3, 4)), ["a", "b"], TOKENS)
    with pytest.raises(ValueError, match="got 3 row and 3 column labels"):
        plot_attention(np.zeros((3, 4)), ["a", "b", "c"], TOKENS[:3])


def test_plot_weight_bars():
    row = torch.tensor([0.1, 0.2, 0.3, 0.4])
    ax = plot_weight_bars(row, TOKENS, highlight=3, title="row")
    assert isinstance(ax, Axes)
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, row.numpy(), rtol=1e-6)
    assert ax.patches[3].get_facecolor() != ax.patches[0].get_facecolor()  # highlighted
    _, given = plt.subplots()
    assert plot_weight_bars([0.5, 0.5], ["a", "b"], ax=given) is given
    with pytest.raises(ValueError, match="got 3 tokens for 4 weights"):
        plot_weight_bars(row, TOKENS[:3])
    with pytest.raises(ValueError, match="weights must be a 2-D"):
        plot_weight_bars(np.zeros((2, 2, 2)), TOKENS[:2])


@pytest.mark.parametrize("temperature", [0.01, 1.0, 100.0])
@pytest.mark.parametrize("causal", [False, True])
def test_plot_attention_view(temperature, causal):
    q, k, v = qkv()
    fig = plot_attention_view(TOKENS, q, k, v, query_index=2, temperature=temperature, causal=causal)
    assert isinstance(fig, Figure)
    heatmap = fig.axes[0].images[0].get_array()
    assert heatmap.shape == (4, 4)
    assert np.isfinite(heatmap).all()
    np.testing.assert_allclose(np.asarray(heatmap).sum(axis=1), 1.0, rtol=1e-5)
    if causal:
        assert np.all(np.triu(np.asarray(heatmap), 1) == 0)
    if temperature == 100.0:  # flattened towards uniform over the allowed keys
        allowed = np.tril(np.ones((4, 4))) if causal else np.ones((4, 4))
        np.testing.assert_allclose(heatmap, allowed / allowed.sum(1, keepdims=True), atol=0.02)


def test_plot_attention_view_uses_the_given_figure():
    q, k, v = qkv()
    fig = plt.figure()
    assert plot_attention_view(TOKENS, q, k, v, fig=fig) is fig
    assert len(fig.axes) >= 2


@pytest.mark.parametrize("kwargs,message", [
    (dict(query_index=4), r"query_index must be in \[0, 3\], got 4"),
    (dict(query_index=-1), r"query_index must be in \[0, 3\], got -1"),
    (dict(temperature=0.0), "temperature must be a positive finite number, got 0.0"),
    (dict(temperature=-1.0), "temperature must be a positive finite number"),
    (dict(temperature=math.inf), "temperature must be a positive finite number, got inf"),
    (dict(temperature=math.nan), "temperature must be a positive finite number, got nan"),
])
def test_plot_attention_view_bad_arguments(kwargs, message):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=message):
        plot_attention_view(TOKENS, q, k, v, **kwargs)


def test_plot_attention_view_bad_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="same feature size d_k, got 8 and 7"):
        plot_attention_view(TOKENS, q, k[:, :7], v)


# ------------------------------------------------------------------------------ widgets


def test_attention_explorer_redraws_at_the_extremes(monkeypatch):
    pytest.importorskip("ipywidgets")
    import ipywidgets

    from aiayn.figures.attention import attention_explorer

    calls = []
    original = aiayn.figures.attention.plot_attention_view

    def recording_view(*args, **kwargs):
        fig = original(*args, **kwargs)
        heatmap = np.asarray(fig.axes[0].images[0].get_array())
        calls.append((args[4:], np.isfinite(heatmap).all()))
        return fig

    monkeypatch.setattr(aiayn.figures.attention, "plot_attention_view", recording_view)
    q, k, v = qkv()
    box = attention_explorer(TOKENS, q, k, v, twin=False)
    assert isinstance(box, ipywidgets.Widget)
    pick, temperature, causal = box.children[0].children
    assert len(calls) == 1  # drawn once on creation
    assert (temperature.min, temperature.max) == (-2, 2)  # log10 of 0.01 and 100

    temperature.value = 0.01
    temperature.value = 100.0
    causal.value = True
    temperature.value = 0.01
    pick.value = 3
    causal.value = False

    assert [c[0] for c in calls[1:]] == [
        (0, pytest.approx(0.01), False),
        (0, pytest.approx(100.0), False),
        (0, pytest.approx(100.0), True),
        (0, pytest.approx(0.01), True),
        (3, pytest.approx(0.01), True),
        (3, pytest.approx(0.01), False),
    ]
    assert all(finite for _, finite in calls)
    assert len(plt.get_fignums()) <= 1  # old figures are closed, not leaked


def test_attention_explorer_bad_tokens():
    pytest.importorskip("ipywidgets")
    from aiayn.figures.attention import attention_explorer

    q, k, v = qkv()
    with pytest.raises(ValueError, match="got 3 tokens for 4 query rows"):
        attention_explorer(TOKENS[:3], q, k, v)
