"""aiayn.experiments.heads (chapter 4): the per-head loop, torch parity, cost formulas, the tiny
encoder and its attention maps, the head measures; the two-relation task; the plots and the
head explorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_parity, randomize_
from torch import nn

from aiayn import EncoderLayer, MultiHeadAttention, causal_mask
from aiayn.experiments.heads import (
    TinyEncoder,
    attention_cost,
    attention_entropy,
    count_matmul_flops,
    head_summary,
    mass_on_positions,
    multi_head_attention_loop,
    offset_profile,
    permute_heads,
    to_torch_multihead_attention,
)
from aiayn.learning.data import IGNORE_INDEX, two_relation_labels, two_relation_task


def inputs(batch=2, t_len=5, s_len=7, d_model=12, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, t_len, d_model, generator=gen, dtype=dtype)
    kv = torch.randn(batch, s_len, d_model, generator=gen, dtype=dtype)
    return q, kv


# ------------------------------------------------------------------- three implementations


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_heads", [1, 3, 4])
@pytest.mark.parametrize("masked", [False, True])
def test_loop_matches_batched_and_torch(dtype, n_heads, masked):
    mha = randomize_(MultiHeadAttention(12, n_heads)).to(dtype).eval()
    q, kv = inputs(dtype=dtype)
    mask = causal_mask(7)[:5] if masked else None  # (T, S), True = may attend
    out_loop, w_loop = multi_head_attention_loop(mha, q, kv, kv, mask)
    out_explicit, w_explicit = mha(q, kv, kv, mask, need_weights=True)
    out_fused = mha(q, kv, kv, mask)
    theirs = to_torch_multihead_attention(mha)
    out_torch, w_torch = theirs(q, kv, kv, attn_mask=None if mask is None else ~mask,
                                need_weights=True, average_attn_weights=False)
    assert w_loop.shape == (2, n_heads, 5, 7)
    assert_parity(out_loop, out_explicit, "loop vs explicit")
    assert_parity(out_loop, out_fused, "loop vs fused")
    assert_parity(out_loop, out_torch, "loop vs nn.MultiheadAttention")
    assert_parity(w_loop, w_explicit, "weights loop vs explicit")
    assert_parity(w_loop, w_torch, "weights loop vs nn.MultiheadAttention")
    if masked:
        assert torch.all(w_loop[..., ~mask] == 0)


def test_loop_without_bias_and_head_slices():
    from aiayn import scaled_dot_product_attention

    mha = randomize_(MultiHeadAttention(8, 2, bias=False)).double()
    q, kv = inputs(d_model=8)
    out_loop, _ = multi_head_attention_loop(mha, q, kv, kv)
    assert_parity(out_loop, mha(q, kv, kv), "no bias")
    # Silence head 1 (its W^V rows 4..8): the output is head 0 through W^O's columns 0..4.
    with torch.no_grad():
        mha.w_v.weight[4:] = 0
    w_q, w_k, w_v = (lin.weight[:4] for lin in (mha.w_q, mha.w_k, mha.w_v))
    head_0, _ = scaled_dot_product_attention(q @ w_q.T, kv @ w_k.T, kv @ w_v.T)
    out_silenced, _ = multi_head_attention_loop(mha, q, kv, kv)
    assert_parity(out_silenced, head_0 @ mha.w_o.weight[:, :4].T, "head 0 alone")
    assert_parity(out_silenced, mha(q, kv, kv), "silenced head, batched")


def test_to_torch_copies_a_training_flag_and_dtype():
    mha = MultiHeadAttention(8, 2).double().train()
    theirs = to_torch_multihead_attention(mha)
    assert isinstance(theirs, nn.MultiheadAttention) and theirs.training
    assert theirs.in_proj_weight.dtype == torch.float64
    assert torch.equal(theirs.in_proj_weight[8:16], mha.w_k.weight)
    assert torch.equal(theirs.out_proj.bias, mha.w_o.bias)
    plain = to_torch_multihead_attention(MultiHeadAttention(8, 2, bias=False))
    assert plain.in_proj_bias is None


def test_permute_heads_keeps_the_function():
    mha = randomize_(MultiHeadAttention(12, 3)).double()
    q, kv = inputs()
    out, weights = mha(q, kv, kv, need_weights=True)
    permute_heads(mha, [2, 0, 1])
    out_p, weights_p = mha(q, kv, kv, need_weights=True)
    assert_parity(out_p, out, "permuted heads")
    assert_parity(weights_p, weights[:, [2, 0, 1]], "weights follow their heads")
    with pytest.raises(ValueError, match=r"order must be a permutation of 0..2, got \[0, 0, 1\]"):
        permute_heads(mha, [0, 0, 1])


def test_bad_mha_argument():
    with pytest.raises(TypeError, match="mha must be an aiayn.MultiHeadAttention, got Linear"):
        multi_head_attention_loop(nn.Linear(2, 2), *inputs()[:1], *inputs()[1:], inputs()[1])
    with pytest.raises(TypeError, match="mha must be an aiayn.MultiHeadAttention"):
        to_torch_multihead_attention(nn.MultiheadAttention(4, 2))
    q, kv = inputs(d_model=12)
    with pytest.raises(ValueError, match="query must have d_model=8 features"):
        multi_head_attention_loop(MultiHeadAttention(8, 2).double(), q, kv, kv)


# ------------------------------------------------------------------------------------ cost


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8, 16])
def test_cost_formula_matches_modules_and_flop_counter(n_heads):
    d_model, batch, t_len, s_len = 64, 2, 5, 7
    cost = attention_cost(d_model, n_heads, t_len, s_len, batch)
    mha = MultiHeadAttention(d_model, n_heads)
    assert cost.params == sum(p.numel() for p in mha.parameters()) == 4 * 64 * 64 + 4 * 64
    q = torch.randn(batch, t_len, d_model)
    kv = torch.randn(batch, s_len, d_model)
    counted = count_matmul_flops(mha, q, kv, kv, need_weights=True)
    assert counted == cost.matmul_flops
    # The same for every h; only the softmax grows.
    assert cost.matmul_flops == attention_cost(d_model, 1, t_len, s_len, batch).matmul_flops
    assert cost.weight_entries == batch * n_heads * t_len * s_len
    assert cost.score_flops == cost.mixing_flops == 2 * batch * t_len * s_len * d_model
    # Per head 2 T S d_k (scores) + 2 T S d_v (weights @ V): 4 T S d_model over all heads.
    assert cost.score_flops + cost.mixing_flops == 4 * batch * t_len * s_len * d_model
    assert cost.projection_flops == 2 * batch * d_model**2 * (2 * t_len + 2 * s_len)


def test_cost_defaults_and_bad_input():
    assert attention_cost(8, 2, 3) == attention_cost(8, 2, 3, 3, 1)
    assert attention_cost(8, 2, 3, bias=False).params == 4 * 64
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by n_heads \(4\)"):
        attention_cost(10, 4, 3)
    with pytest.raises(ValueError, match="t_len must be a positive int, got 0"):
        attention_cost(8, 2, 0)
    with pytest.raises(ValueError, match="s_len must be a positive int, got -1"):
        attention_cost(8, 2, 3, -1)


def test_count_matmul_flops_of_a_plain_matmul():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert count_matmul_flops(torch.mm, a, b) == 2 * 3 * 4 * 5


# ------------------------------------------------------------------------ the tiny encoder


@pytest.mark.parametrize("norm_first", [False, True])
def test_tiny_encoder_maps_are_the_weights_of_the_forward_pass(norm_first):
    torch.manual_seed(0)
    model = TinyEncoder(10, 3, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=8,
                        norm_first=norm_first).double().eval()
    tokens = torch.randint(10, (3, 6), generator=torch.Generator().manual_seed(1))
    logits = model(tokens)
    assert logits.shape == (3, 6, 3)
    maps = model.attention_maps(tokens)
    assert maps.shape == (2, 3, 4, 6, 6)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 4, 6, dtype=torch.float64))
    # Recompute layer 1's weights by hand from the output of layer 0.
    x = model.positions(model.embed(tokens) * math.sqrt(16))
    x = model.layers[0](x)
    h = model.layers[1].norm1(x) if norm_first else x
    _, expected = model.layers[1].self_attn(h, h, h, need_weights=True)
    assert_parity(maps[1], expected, "layer-1 maps")
    assert model.n_heads == 4
    # Embeddings start small, so that embedding * sqrt(d_model) has unit scale.
    assert abs(model.embed.weight.std().item() - 16**-0.5) < 0.05


def test_tiny_encoder_matches_torch_encoder_layer():
    torch.manual_seed(0)
    model = TinyEncoder(10, 3, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=8).double()
    layer: EncoderLayer = model.layers[0]
    theirs = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double()
    from conftest import copy_weights

    copy_weights(layer, theirs)
    tokens = torch.randint(10, (2, 5))
    x = model.positions(model.embed(tokens) * math.sqrt(8))
    assert_parity(model(tokens), model.head(theirs(x)), "TinyEncoder vs torch layer")


def test_tiny_encoder_bad_input():
    model = TinyEncoder(10, 3, d_model=8, n_heads=2, max_len=6)
    with pytest.raises(ValueError, match=r"tokens holds token ids in \[0, 10\]"):
        model(torch.tensor([[0, 10]]))
    with pytest.raises(ValueError, match="longer than max_len=6"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size must be a positive int, got 0"):
        TinyEncoder(0, 3)
    with pytest.raises(ValueError, match=r"d_model \(8\) must be divisible by n_heads \(3\)"):
        TinyEncoder(10, 3, d_model=8, n_heads=3)


# ------------------------------------------------------------------------- head measures


def one_hot_weights():
    """Head 0 looks at the previous token (query 0 at itself), head 1 uniformly."""
    t_len = 4
    w = torch.zeros(1, 2, t_len, t_len, dtype=torch.float64)
    for t in range(t_len):
        w[0, 0, t, max(t - 1, 0)] = 1.0
    w[0, 1] = 1.0 / t_len
    return w


def test_entropy_profile_and_mass():
    w = one_hot_weights()
    assert torch.allclose(attention_entropy(w), torch.tensor([0.0, math.log(4)], dtype=torch.float64))
    profile = offset_profile(w)
    assert profile.shape == (2, 7)
    assert torch.allclose(profile.sum(-1), torch.ones(2, dtype=torch.float64))
    assert profile[0, 2] == pytest.approx(0.75)  # offset -1: queries 1, 2, 3
    assert profile[0, 3] == pytest.approx(0.25)  # offset 0: query 0
    queries = torch.tensor([[False, True, True, True]])
    assert offset_profile(w, queries)[0, 2] == pytest.approx(1.0)
    positions = torch.tensor([[1, 0, 1, 2]])  # head 0 hits it at queries 1, 2, 3
    assert torch.allclose(mass_on_positions(w, positions),
                          torch.tensor([0.75, 0.25], dtype=torch.float64))
    rows = head_summary(w, positions, queries)
    assert rows[0]["top_offset"] == -1 and rows[0]["previous"] == pytest.approx(1.0)
    assert rows[0]["matching"] == pytest.approx(1.0) and rows[0]["entropy"] == 0.0
    assert rows[1]["itself"] == pytest.approx(0.25)


def test_measures_bad_input():
    w = one_hot_weights()
    with pytest.raises(ValueError, match="weights must have 4 dimensions"):
        attention_entropy(w[0])
    with pytest.raises(ValueError, match=r"queries must be a boolean \(B, T\) = \(1, 4\) tensor"):
        attention_entropy(w, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="queries selects no query"):
        offset_profile(w, torch.zeros(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"positions must be an integer \(B, T\)"):
        mass_on_positions(w, torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"positions must index keys in \[0, 3\]"):
        mass_on_positions(w, torch.tensor([[0, 1, 2, 4]]))


# ------------------------------------------------------------------------------ the task


def test_two_relation_task():
    tokens, targets, matching = two_relation_task(50, n_keys=5, n_values=3,
                                                  generator=torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == matching.shape == (50, 10)
    keys, values = tokens // 3, tokens % 3
    assert torch.equal(keys.sort(-1).values, torch.arange(5).repeat_interleave(2).expand(50, -1))
    rows = torch.arange(50)[:, None]
    assert torch.all(keys[rows, matching] == keys) and torch.all(matching != torch.arange(10))
    assert torch.all(targets[:, 0] == IGNORE_INDEX)
    expected = values[:, :-1] * 3 + values[rows, matching][:, 1:]
    assert torch.equal(targets[:, 1:], expected)
    again = two_relation_task(50, 5, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], tokens)
    assert two_relation_labels(torch.tensor([0, 5, 7]), 4) == ["A0", "B1", "B3"]


def test_two_relation_task_bad_input():
    with pytest.raises(ValueError, match="n_keys must be at least 2"):
        two_relation_task(4, n_keys=1)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        two_relation_task(0)
    with pytest.raises(ValueError, match=r"tokens must be one row \(T,\)"):
        two_relation_labels(torch.zeros(2, 3, dtype=torch.long))


# ----------------------------------------------------------------------- plots and widget


def trained_like_maps():
    tokens, _, matching = two_relation_task(3, n_keys=4, generator=torch.Generator().manual_seed(0))
    model = TinyEncoder(16, 16, d_model=16, n_heads=2, n_layers=2, d_ff=16, max_len=8)
    return model, tokens, matching


def test_plots():
    import matplotlib.pyplot as plt

    from aiayn.figures.heads import plot_head_maps, plot_head_masses, plot_head_view

    model, tokens, matching = trained_like_maps()
    maps = model.attention_maps(tokens)  # (L, B, H, T, T)
    labels = two_relation_labels(tokens[0])
    fig = plot_head_maps([maps[0, 0, 0], maps[1, 0, 1]], labels, ["a", "b"], matching[0].tolist())
    assert len(fig.axes) == 3 and fig.axes[1].get_title() == "b"
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), maps[0, 0, 0].numpy(), rtol=1e-6)
    ax = plot_head_masses({"h0": {"previous": 0.5, "matching": 0.2, "itself": 0.1}})
    assert [p.get_height() for p in ax.patches] == [0.5, 0.2, 0.1]
    fig = plot_head_view(maps[:, 0], labels, layer=1, head=1, matching=matching[0].tolist())
    bars = fig.axes[1].patches
    widths = np.array([b.get_width() for b in bars]).reshape(-1, 8).sum(0)
    np.testing.assert_allclose(widths, 1.0, atol=1e-6)  # the shares fill each row
    # A query whose matching token is its previous token: that weight is one hatched segment,
    # counted once, and the row still sums to 1.
    w = torch.full((1, 1, 3, 3), 0.1, dtype=torch.float64)
    w[0, 0, 2] = torch.tensor([0.1, 0.8, 0.1], dtype=torch.float64)
    fig = plot_head_view(w, ["a", "b", "c"], matching=[1, 0, 1])
    bars = fig.axes[1].patches
    widths = np.array([b.get_width() for b in bars]).reshape(-1, 3)
    np.testing.assert_allclose(widths.sum(0), 1.0, atol=1e-12)
    hatched = [float(b.get_width()) for b in bars if b.get_hatch()]
    assert hatched == [0.0, 0.1, 0.8]  # rows b and c: each one's match is its previous token
    # the means count that weight for both relations, as the chapter's table does
    assert fig.axes[1].get_title() == "mean: previous 0.45, matching 0.45"
    with pytest.raises(ValueError, match=r"head must be in \[0, 1\], got 2"):
        plot_head_view(maps[:, 0], labels, head=2)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 1\], got -1"):
        plot_head_view(maps[:, 0], labels, layer=-1)
    with pytest.raises(ValueError, match="got 3 tokens for maps of 8 positions"):
        plot_head_view(maps[:, 0], labels[:3])
    with pytest.raises(ValueError, match="got 1 maps and 2 titles"):
        plot_head_maps([maps[0, 0, 0]], labels, ["a", "b"])
    plt.close("all")


def test_head_explorer_redraws_at_the_extremes(monkeypatch):
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    import aiayn.figures.heads
    from aiayn.figures.heads import head_explorer

    calls = []
    original = aiayn.figures.heads.plot_head_view

    def recording(maps, labels, layer, head, matching):
        fig = original(maps, labels, layer, head, matching)
        image = np.asarray(fig.axes[0].images[0].get_array())
        calls.append((layer, head, np.isfinite(image).all()))
        return fig

    monkeypatch.setattr(aiayn.figures.heads, "plot_head_view", recording)
    model, tokens, matching = trained_like_maps()
    one_head = TinyEncoder(16, 16, d_model=16, n_heads=1, n_layers=1, d_ff=16, max_len=8)
    labels = [two_relation_labels(row) for row in tokens]
    box = head_explorer({"two heads": model, "one head": one_head}, tokens, labels, matching,
                       twin=False)
    controls, example, _ = box.children
    pick_model, layer, head = controls.children
    assert len(calls) == 1
    layer.value, head.value, example.value = 1, 1, example.max
    pick_model.value = "one head"  # menus shrink to layer 0, head 0: one redraw
    assert list(head.options) == [0] and list(layer.options) == [0]
    example.value = example.min
    assert calls[1:] == [(1, 0, True), (1, 1, True), (1, 1, True), (0, 0, True), (0, 0, True)]
    assert len(plt.get_fignums()) <= 1
    # the opening setting: model, layer, head and input shown first
    box = head_explorer({"two heads": model, "one head": one_head}, tokens, labels, matching,
                        twin=False, model="two heads", layer=1, head=1, example=2)
    (pick_model, layer, head), example = box.children[0].children, box.children[1]
    assert (pick_model.value, layer.value, head.value, example.value) == ("two heads", 1, 1, 2)
    assert calls[-1] == (1, 1, True)
    pick_model.value = "one head"  # a later switch still resets the menus
    assert (layer.value, head.value) == (0, 0)
    for bad, name in ((dict(model="three heads"), "model"), (dict(layer=2), "layer"),
                      (dict(head=2), "head"), (dict(example=len(labels)), "example"),
                      (dict(model="one head", head=1), "head")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            head_explorer({"two heads": model, "one head": one_head}, tokens, labels,
                          twin=False, **bad)
    with pytest.raises(ValueError, match="got 2 label rows for tokens of shape"):
        head_explorer({"m": model}, tokens, labels[:2])
    with pytest.raises(ValueError, match="models must name at least one model"):
        head_explorer({}, tokens, labels)
