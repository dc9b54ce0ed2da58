"""aiayn.experiments.costs and aiayn.experiments.measurement: Table 1's costs, timing,
power-law fits, and the critical-path count."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn import MultiHeadAttention
from aiayn.experiments.measurement import critical_path_length, fit_power_law, time_call
from aiayn.experiments.recurrence import RNN


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


# ------------------------------------------------------------------ Table 1 and memory

from aiayn.experiments.costs import (  # noqa: E402
    LAYER_KINDS,
    Conv1dLayer,
    attention_core,
    crossover_length,
    layer_cost,
    recurrent_core,
    restricted_attention_core,
)
from aiayn.experiments.measurement import (  # noqa: E402
    count_flops,
    dependency_matrix,
    hops_to_connect,
    peak_memory_bytes,
    saved_tensor_bytes,
    time_stats,
)


@pytest.mark.parametrize("n, d", [(8, 16), (16, 8), (5, 12)])
def test_layer_cost_formulas_match_counted_flops(n, d):
    torch.manual_seed(0)
    x = torch.randn(1, n, d)
    w_xh, w_hh = torch.randn(d, d), torch.randn(d, d)
    counted = {
        "self-attention": count_flops(attention_core, x),
        "recurrent": count_flops(recurrent_core, x, w_xh, w_hh),
        "convolutional": count_flops(Conv1dLayer(d, 5), x),
        "restricted": count_flops(restricted_attention_core, x, 3),
    }
    for kind in LAYER_KINDS:
        assert layer_cost(kind, n, d, k=5, r=3).flops == counted[kind], kind


def test_layer_cost_columns_and_crossover():
    att, rnn = layer_cost("self-attention", 512, 512), layer_cost("recurrent", 512, 512)
    assert att.flops == rnn.flops and crossover_length(512) == 512.0
    assert layer_cost("self-attention", 256, 512).flops < layer_cost("recurrent", 256, 512).flops
    assert (att.sequential_ops, rnn.sequential_ops) == (1, 512)
    assert layer_cost("convolutional", 17, 4, k=3).max_path_length == 16
    assert layer_cost("restricted", 17, 4, r=5).max_path_length == 8
    with pytest.raises(ValueError, match="kind must be one of"):
        layer_cost("lstm", 4, 4)
    with pytest.raises(ValueError, match="k must be an odd int >= 3"):
        layer_cost("convolutional", 4, 4, k=4)
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        layer_cost("recurrent", 0, 4)


def test_restricted_attention_equals_banded_full_attention():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 4)
    r = 5
    scores = x @ x.transpose(-2, -1) / 2.0
    i = torch.arange(9)
    band = (i[:, None] - i[None, :]).abs() <= r // 2
    expected = torch.softmax(scores.masked_fill(~band, float("-inf")), -1) @ x
    torch.testing.assert_close(restricted_attention_core(x, r), expected)
    with pytest.raises(ValueError, match="r must be odd"):
        restricted_attention_core(x, 4)


def test_recurrent_core_matches_the_rnn_layer():
    torch.manual_seed(0)
    rnn = RNN(6, 6, bias=False)
    x = torch.randn(2, 7, 6)
    expected, _ = rnn(x)
    got = recurrent_core(x, rnn.w_xh.weight.T, rnn.w_hh.weight.T)
    torch.testing.assert_close(got, expected)
    # A window as long as the sequence changes nothing.
    torch.testing.assert_close(recurrent_core(x, rnn.w_xh.weight.T, rnn.w_hh.weight.T, 7), got)


def test_hops_to_connect_reads_the_path_length_off_the_gradient():
    torch.manual_seed(0)
    n, d = 9, 3
    x = torch.randn(1, n, d)
    assert dependency_matrix(attention_core, x).all()
    conv = Conv1dLayer(d, 3)

    def conv_stack(z, hops):
        for _ in range(hops):
            z = conv(z)
        return z

    hops = hops_to_connect(conv_stack, x, 20)
    assert hops.max() == layer_cost("convolutional", n, d).max_path_length == 8
    assert hops[4, 4] == 1 and hops[0, 8] == 8
    w = torch.randn(d, d) * 0.5
    rec = hops_to_connect(lambda z, h: recurrent_core(z, w, w, window=h), x, n)
    assert rec[8, 0] == 9 and rec[0, 8] == 0  # causal: the future never reaches the past
    with pytest.raises(ValueError, match="x must have shape"):
        dependency_matrix(attention_core, torch.randn(2, 3, 3))


def test_memory_of_the_explicit_and_fused_paths():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    n = 64
    x = torch.randn(1, n, 16)
    explicit = saved_tensor_bytes(lambda: mha(x, x, x, need_weights=True))
    fused = saved_tensor_bytes(lambda: mha(x, x, x))
    # The explicit path keeps the (1, 2, n, n) weights for backward; the fused one not.
    assert explicit >= 2 * n * n * 4 and explicit - fused > n * n * 4
    with torch.no_grad():
        peak_explicit = peak_memory_bytes(lambda: mha(x, x, x, need_weights=True))
        peak_fused = peak_memory_bytes(lambda: mha(x, x, x))
    assert peak_explicit >= 2 * n * n * 4 > peak_fused > 0
    with pytest.raises(TypeError, match="fn must be callable"):
        saved_tensor_bytes(3)


def test_time_stats_orders_its_numbers():
    median, low, high = time_stats(lambda: sum(range(1000)), repeats=3)
    assert 0 < low <= median <= high


def test_crossing_point():
    from aiayn.experiments.measurement import crossing_point

    n = [64, 128, 256, 512, 1024]
    quadratic = [v * v for v in n]
    linear = [256 * v for v in n]
    assert crossing_point(n, quadratic, linear) == pytest.approx(256.0)
    assert crossing_point(n, linear, quadratic) is None  # linear never overtakes
    with pytest.raises(ValueError, match="equal length"):
        crossing_point([1, 2], [1], [1, 2])


def test_chapter8_plots_and_explorer():
    import matplotlib.pyplot as plt

    from aiayn.figures.costs import plot_hops, plot_layer_costs, plot_measured_costs

    ax = plot_layer_costs(64, k=5, r=9, n_max=1024)
    assert len(ax.get_lines()) == 4 + 1  # four layers and the n = d line
    assert ax.get_lines()[-1].get_xdata()[0] == 64
    ax = plot_measured_costs([1, 2, 4], {"recurrent": [1, 2, 4]}, {"recurrent": 1.0})
    assert "slope 1.00" in ax.get_legend().get_texts()[0].get_text()
    hops = {"a": torch.ones(4, 4, dtype=torch.long), "b": torch.tril(torch.ones(4, 4)).long()}
    fig = plot_hops(hops)
    assert len(fig.axes) == 3  # two maps and a colour bar
    plt.close("all")
    pytest.importorskip("ipywidgets")
    from aiayn.figures.costs import complexity_explorer

    box = complexity_explorer(d=128, twin=False)
    width = box.children[0].children[0]
    for value in (width.min, width.max):  # the extremes redraw without error
        width.value = value
    plt.close("all")
    # the opening setting: a value of each slider
    box = complexity_explorer(d=4096, twin=False, k=31, r=255, n_max=65536)
    sliders = [*box.children[0].children, *box.children[1].children]
    assert [s.value for s in sliders] == [4096, 31, 255, 65536]
    plt.close("all")
    for bad, name in ((dict(d=500), "d"), (dict(k=4), "k"), (dict(r=257), "r"),
                      (dict(n_max=63), "n_max")):
        with pytest.raises(ValueError, match=f"{name} must be an int in"):
            complexity_explorer(twin=False, **bad)


# ------------------------------------------- separable convolution, whole encoder layer

from aiayn.experiments.costs import (  # noqa: E402
    ALL_LAYER_KINDS,
    SeparableConv1dLayer,
    encoder_layer_flops,
    quadratic_half_length,
)


@pytest.mark.parametrize("n, d, k", [(8, 16, 3), (16, 8, 5), (9, 12, 9)])
def test_separable_convolution_flops_and_path(n, d, k):
    torch.manual_seed(0)
    layer = SeparableConv1dLayer(d, k)
    x = torch.randn(2, n, d)
    assert layer(x).shape == (2, n, d)
    cost = layer_cost("separable", n, d, k=k)
    assert "separable" in ALL_LAYER_KINDS and "separable" not in LAYER_KINDS
    assert count_flops(layer, x[:1]) == cost.flops == 2 * k * n * d + 2 * n * d * d
    assert cost.sequential_ops == 1
    assert cost.max_path_length == layer_cost("convolutional", n, d, k=k).max_path_length


def test_separable_convolution_path_read_off_the_gradient():
    torch.manual_seed(0)
    n, d, k = 7, 2, 3
    layer = SeparableConv1dLayer(d, k)

    def stack(z, hops):
        for _ in range(hops):
            z = layer(z)
        return z

    hops = hops_to_connect(stack, torch.randn(1, n, d), n)
    assert int(hops.max()) == layer_cost("separable", n, d, k=k).max_path_length == 6


def test_separable_convolution_is_depthwise_then_pointwise():
    torch.manual_seed(0)
    d, k = 4, 3
    layer = SeparableConv1dLayer(d, k)
    x = torch.randn(1, 6, d)
    w = layer.depthwise.weight[:, 0]  # (d, k): one kernel per channel
    padded = torch.nn.functional.pad(x, (0, 0, 1, 1))[0]  # (n + 2, d)
    mixed = torch.stack([(padded[t:t + k].T * w).sum(-1) for t in range(6)])  # (n, d)
    torch.testing.assert_close(layer(x)[0], mixed @ layer.pointwise.weight.T)
    with pytest.raises(ValueError, match="k must be odd"):
        SeparableConv1dLayer(4, 2)
    with pytest.raises(ValueError, match="d_model must be a positive int, got 0"):
        SeparableConv1dLayer(0, 3)


def test_encoder_layer_flops_match_the_counted_layer():
    from aiayn.layers import EncoderLayer

    d_model, n_heads, d_ff = 64, 4, 256
    with torch.device("meta"):  # shapes only: FlopCounterMode needs no values
        layer = EncoderLayer(d_model, n_heads, d_ff, dropout=0.0).eval()
        for n in (8, 100, quadratic_half_length(d_model, d_ff)):
            parts = encoder_layer_flops(n, d_model, d_ff)
            assert count_flops(layer, torch.randn(1, n, d_model)) == sum(parts.values())
    half = quadratic_half_length(d_model, d_ff)
    assert half == 2 * d_model + d_ff == 384
    parts = encoder_layer_flops(half, d_model, d_ff)
    assert 2 * parts["attention"] == sum(parts.values())
    below = encoder_layer_flops(half - 1, d_model, d_ff)
    assert 2 * below["attention"] < sum(below.values())
    with pytest.raises(ValueError, match="d_ff must be a positive int, got 0"):
        encoder_layer_flops(4, 8, 0)
    with pytest.raises(ValueError, match="d_model must be a positive int, got -1"):
        quadratic_half_length(-1, 8)
