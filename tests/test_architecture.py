"""aiayn.inspection, aiayn.experiments.normalization and aiayn.learning.recipes: chapter 6's
measurements, the bridge to torch.nn.Transformer, and chapter 7's recipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from aiayn import Transformer
from aiayn.experiments.normalization import (
    layer_gradient_norms,
    layer_norm,
    normalize,
    padding_effect,
)
from aiayn.inspection import (
    ATTENTION_KINDS,
    attention_maps,
    to_torch_names,
    torch_reference_logits,
    torch_transformer,
)
from aiayn.learning.data import date_batch, date_pairs, date_tokenizer
from aiayn.learning.recipes import (
    date_batch_fn,
    date_config,
    date_test_pairs,
    exact_match,
    no_ramp_lr,
    train_date_model,
    train_to_accuracy,
)
from aiayn.learning.training import noam_lr

TOK = date_tokenizer()


def _model(norm_first=False, n_layers=2, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return Transformer(date_config(TOK, n_layers=n_layers, norm_first=norm_first)).to(dtype)


def _batch(n=6, seed=1):
    return date_batch(date_pairs(n, seed=seed), TOK)  # src padded; tgt = <bos> .. <eos>


# ------------------------------------------------------------------ LayerNorm, BatchNorm


def test_layer_norm_is_per_token_and_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64) * 4 + 2
    ours = layer_norm(x)
    theirs = nn.LayerNorm(16, elementwise_affine=False).double()(x)
    assert (ours - theirs).abs().max() < 1e-12
    assert ours.mean(-1).abs().max() < 1e-12
    assert (ours.var(-1, unbiased=False) - 1).abs().max() < 1e-4  # eps = 1e-5
    one = layer_norm(x[1:2, 2:3])  # one token alone gives the same row (to rounding:
    assert (one[0, 0] - ours[1, 2]).abs().max() < 1e-14  # reductions may vectorise differently)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer_norm(torch.ones(2, 3, dtype=torch.long))


def test_padding_moves_batchnorm_outputs_but_not_layernorm():
    torch.manual_seed(0)
    x = torch.randn(4, 6, 8) * 2 + 1
    assert padding_effect(nn.LayerNorm(8), x, 10) == 0.0
    bn = nn.BatchNorm1d(8)
    running = bn.running_mean.clone()
    shifts = [padding_effect(bn, x, n) for n in (0, 2, 10)]
    assert shifts[0] == 0.0 and 0.1 < shifts[1] < shifts[2]  # more padding, larger shift
    assert torch.equal(bn.running_mean, running)  # the measurement leaves no trace
    assert normalize(nn.LayerNorm(8), x).shape == normalize(bn, x).shape == x.shape
    with pytest.raises(ValueError, match="n_pad must be a non-negative int"):
        padding_effect(bn, x, -1)
    with pytest.raises(ValueError, match=r"x must be \(batch, length, d\)"):
        padding_effect(bn, x[0], 2)
    with pytest.raises(TypeError, match="norm must be nn.LayerNorm or nn.BatchNorm1d"):
        normalize(nn.Identity(), x)


# -------------------------------------------------------------------- gradients, maps


def test_post_ln_decoder_gradients_shrink_with_depth_pre_ln_do_not():
    src, tgt = _batch(16)
    post = layer_gradient_norms(_model(False, 8, torch.float32), src, tgt)
    pre = layer_gradient_norms(_model(True, 8, torch.float32), src, tgt)
    assert len(post["encoder"]) == len(post["decoder"]) == 8
    assert post["decoder"][-1] / post["decoder"][0] > 8  # vanishing toward the input (11.5)
    assert max(pre["decoder"]) / min(pre["decoder"]) < 3
    model = _model()
    layer_gradient_norms(model, src, tgt)
    assert all(p.grad is None for p in model.parameters())  # cleared afterwards


def test_attention_maps_shapes_rows_and_causality():
    model = _model().train()
    src, tgt = _batch(4)
    maps = attention_maps(model, src, tgt[:, :-1])
    assert model.training  # mode restored
    assert tuple(maps) == ATTENTION_KINDS
    S, T = src.shape[1], tgt.shape[1] - 1
    assert [tuple(m.shape) for m in maps["encoder self"]] == [(4, 4, S, S)] * 2
    assert [tuple(m.shape) for m in maps["decoder self"]] == [(4, 4, T, T)] * 2
    assert [tuple(m.shape) for m in maps["cross"]] == [(4, 4, T, S)] * 2
    for kind in ATTENTION_KINDS:
        for m in maps[kind]:
            assert torch.allclose(m.sum(-1), torch.ones((), dtype=m.dtype))
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert all(m[..., future].abs().max() == 0 for m in maps["decoder self"])
    padded = src == TOK.pad_id  # (B, S): no weight on padding keys
    assert all(m.masked_select(padded[:, None, None, :]).abs().max() == 0 for m in maps["cross"])


def test_attention_maps_records_only_the_kinds_asked_for():
    model = _model()
    src, tgt = _batch(2)
    maps = attention_maps(model, src, tgt[:, :-1], kinds=("cross",))
    assert list(maps) == ["cross"] and len(maps["cross"]) == 2
    full = attention_maps(model, src, tgt[:, :-1])["cross"]
    assert all(torch.equal(a, b) for a, b in zip(maps["cross"], full, strict=True))
    with pytest.raises(ValueError, match="kinds must be among"):
        attention_maps(model, src, tgt[:, :-1], kinds=("self",))


# ------------------------------------------------------------------ torch.nn.Transformer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_whole_model_matches_torch_nn_transformer(norm_first, dtype, tol):
    model = _model(norm_first, 3, dtype)
    theirs = torch_transformer(model)
    src, tgt = _batch(5)
    keep = tgt[:, :-1] != TOK.pad_id  # padded target rows are not compared
    for training in (False, True):  # dropout is 0: the modes must agree too
        model.train(training), theirs.train(training)
        ours = model(src, tgt[:, :-1])
        ref = torch_reference_logits(model, theirs, src, tgt[:, :-1])
        assert (ours - ref)[keep].abs().max().item() < tol
    with torch.no_grad():  # the check can fail: one weight changed
        theirs.decoder.layers[-1].linear2.weight[0, 0] += 1e-3
    ref = torch_reference_logits(model, theirs, src, tgt[:, :-1])
    assert (model(src, tgt[:, :-1]) - ref)[keep].abs().max().item() > 1e-6


def test_to_torch_names_stacks_q_k_v():
    w = {f"layers.0.self_attn.w_{c}.weight": torch.full((2, 2), float(i))
         for i, c in enumerate("qkv")}
    w["layers.0.cross_attn.w_o.bias"] = torch.zeros(2)
    w["layers.0.feed_forward.linear1.weight"] = torch.zeros(3, 2)
    out = to_torch_names(w)
    assert sorted(out) == ["layers.0.linear1.weight", "layers.0.multihead_attn.out_proj.bias",
                           "layers.0.self_attn.in_proj_weight"]
    assert out["layers.0.self_attn.in_proj_weight"][:, 0].tolist() == [0, 0, 1, 1, 2, 2]


# ----------------------------------------------------------------------------- recipes


def test_date_recipe_pieces():
    config = date_config(TOK, norm_first=True)
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (64, 4, 2, 256)
    assert config.norm_first and config.src_vocab == len(TOK)
    pairs = date_test_pairs()
    assert len(pairs) >= 1000 and len({iso for _, iso in pairs}) == len(pairs)
    batch_fn = date_batch_fn(TOK, batch=8, n_pairs=20)
    assert torch.equal(batch_fn(3)[0], batch_fn(3)[0])  # depends on the step only
    assert batch_fn(0)[0].shape[0] == 8
    assert [no_ramp_lr(s, 64, 300) for s in (1, 300)] == [noam_lr(300, 64, 300)] * 2
    assert no_ramp_lr(1200, 64, 300) == noam_lr(1200, 64, 300)


def test_exact_match_counts_whole_strings():
    model = _model(dtype=torch.float32).eval()
    pairs = date_test_pairs()[:5]
    assert exact_match(model, TOK, pairs) == 0.0  # untrained: never the whole date
    with pytest.raises(ValueError, match="pairs must hold at least one"):
        exact_match(model, TOK, [])


def test_train_date_model_with_and_without_ramp():
    config = date_config(TOK, d_model=16, n_heads=2, d_ff=32, n_layers=1)
    model, ramp = train_date_model(config, TOK, 6, warmup=4, batch=8)
    _, flat = train_date_model(config, TOK, 6, warmup=4, ramp=False, batch=8)
    assert len(ramp["loss"]) == 6 and not model.training
    assert ramp["lr"][:4] == pytest.approx([noam_lr(s, 16, 4) for s in range(1, 5)])
    assert flat["lr"][:4] == pytest.approx([noam_lr(4, 16, 4)] * 4)  # no ramp
    _, blown = train_date_model(config, TOK, 30, warmup=1, batch=8, ramp=False,
                                seed=0, stop_on_nan=True)
    assert "diverged" not in blown or blown["diverged"][0] <= 30


def test_train_to_accuracy_stops_at_the_target(monkeypatch):
    import aiayn.learning.recipes

    monkeypatch.setattr(aiayn.learning.recipes, "exact_match", lambda *a, **k: 1.0)
    run = train_to_accuracy(0.99, eval_every=3, max_steps=30)
    assert run["steps"] == 3 and run["exact"] == 1.0 and run["seconds"] > 0
    with pytest.raises(ValueError, match=r"target must be in \(0, 1\]"):
        train_to_accuracy(1.5)


# ------------------------------------------------------------------- figures, explorer


def test_chapter6_plots():
    import matplotlib.pyplot as plt

    from aiayn.figures.encoder_decoder import (
        plot_gradient_norms,
        plot_model_attention,
        plot_seed_scores,
        plot_training_runs,
    )

    ax = plot_seed_scores({"a": [0.2, 0.4], "b": [0.9]})
    dots, mean = ax.lines[0], ax.lines[1]
    assert list(dots.get_xdata()) == [0.2, 0.4] and np.allclose(mean.get_xdata(), 0.3)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    with pytest.raises(ValueError, match="at least one score"):
        plot_seed_scores({"a": []})
    ax = plot_gradient_norms({"Post-LN": {"encoder": [1, 2], "decoder": [0.1, 3]}})
    assert len(ax.lines[0].get_xdata()) == 4 and ax.get_yscale() == "log"
    ax = plot_training_runs({"a": np.linspace(2, 1, 50), "short": [3.0, 2.0]}, smooth=10)
    assert len(ax.lines[0].get_xdata()) == 41 and len(ax.lines[1].get_xdata()) == 1
    model = _model(dtype=torch.float32)
    src, tgt = _batch(1)
    maps = attention_maps(model, src, tgt[:, :-1])
    source = [f"s{i}" for i in range(src.shape[1])]
    target = [f"t{i}" for i in range(tgt.shape[1] - 1)]
    ax = plot_model_attention(maps, "cross", 1, None, source, target)
    image = np.asarray(ax.images[0].get_array())
    assert image.shape == (len(target), len(source)) and np.isfinite(image).all()
    with pytest.raises(ValueError, match="kind must be one of"):
        plot_model_attention(maps, "self", 0, 0, source, target)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 1\], got 2"):
        plot_model_attention(maps, "cross", 2, 0, source, target)
    with pytest.raises(ValueError, match=r"head must be None or in \[0, 3\], got 4"):
        plot_model_attention(maps, "cross", 0, 4, source, target)
    plt.close("all")


def test_encoder_decoder_explorer_redraws_every_kind(monkeypatch, capsys):
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    import aiayn.figures.encoder_decoder
    from aiayn.figures.encoder_decoder import encoder_decoder_explorer

    calls = []
    original = aiayn.figures.encoder_decoder.plot_model_attention

    def recording(maps, kind, layer, head, source, target, ax=None):
        ax = original(maps, kind, layer, head, source, target, ax)
        calls.append((kind, layer, head, np.isfinite(ax.images[0].get_array()).all()))
        return ax

    monkeypatch.setattr(aiayn.figures.encoder_decoder, "plot_model_attention", recording)
    model = _model(dtype=torch.float32).eval()
    box = encoder_decoder_explorer(model, TOK, "Nov 29, 2026", twin=False)
    (text, kind), (layer, head) = box.children[0].children, box.children[1].children
    kind.value = "encoder self"
    kind.value = "decoder self"
    layer.value, head.value = 0, 3
    text.value = "#!"  # characters the tokenizer does not know: a message, no exception
    assert calls == [("cross", 1, None, True), ("encoder self", 1, None, True),
                     ("decoder self", 1, None, True), ("decoder self", 0, None, True),
                     ("decoder self", 0, 3, True)]
    # outside a kernel the Output widget passes its prints through to stdout
    assert "Cannot read this input: character '#'" in capsys.readouterr().out
    assert len(plt.get_fignums()) <= 1


def test_date_explorer_redraws_for_every_beam_and_explains_bad_input(monkeypatch, capsys):
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    import aiayn.figures.translation
    import aiayn.learning.decode
    from aiayn.figures.translation import date_explorer

    asked, drawn = [], []
    translate, plot_translation = aiayn.learning.decode.translate, aiayn.figures.translation.plot_translation

    def recording_translate(model, tokenizer, text, beam_size=1, max_len=30):
        asked.append((text, beam_size))
        return translate(model, tokenizer, text, beam_size, max_len)

    def recording_plot(result, title=None):
        fig = plot_translation(result, title)
        drawn.append((result["source"], len(result["chars"]) == len(result["confidence"]),
                      np.isfinite(np.asarray(result["attention"])).all()))
        return fig

    monkeypatch.setattr(aiayn.learning.decode, "translate", recording_translate)
    monkeypatch.setattr(aiayn.figures.translation, "plot_translation", recording_plot)
    model = _model(dtype=torch.float32).eval()  # untrained: any answer will do
    box = date_explorer(model, TOK, "Nov 29, 2026", twin=False)
    text, beam = box.children[0].children
    assert (beam.min, beam.max, beam.value) == (1, 8, 1)
    beam.value = 8  # beam search at the slider's widest
    text.value = "2026-11-29"
    beam.value = 1  # back to greedy
    text.value = "#!"  # characters the tokenizer does not know: a message, no exception
    text.value = " "  # nothing typed
    text.value = "1" * 100  # longer than the model's max_len
    assert asked == [("Nov 29, 2026", 1), ("Nov 29, 2026", 8), ("2026-11-29", 8),
                     ("2026-11-29", 1), ("#!", 1), (" ", 1), ("1" * 100, 1)]
    assert [d[0] for d in drawn] == [[*"Nov 29, 2026", "<eos>"]] * 2 + [[*"2026-11-29", "<eos>"]] * 2
    assert all(same_length and finite for _, same_length, finite in drawn)
    out = capsys.readouterr().out  # outside a kernel the Output widget passes prints through
    assert "Cannot read this input: character '#'" in out
    assert "Cannot read this input: Type a date" in out
    assert "Cannot read this input: the input is too long" in out
    assert len(plt.get_fignums()) <= 1


# ------------------------------------------------ batch statistics, ablations, warm-up, figure


def test_batchnorm_mixes_sequences_layernorm_does_not():
    from aiayn.experiments.normalization import cross_sample_effect, masked_batch_norm

    torch.manual_seed(0)
    x, others = torch.randn(4, 5, 8, dtype=torch.float64), torch.randn(3, 5, 8, dtype=torch.float64)
    assert cross_sample_effect(nn.LayerNorm(8, dtype=torch.float64), x, others) == 0.0
    bn = nn.BatchNorm1d(8, dtype=torch.float64).eval()
    assert cross_sample_effect(bn, x, others) > 0.05 and not bn.training  # mode restored
    keep = torch.ones(4, 5, dtype=torch.bool)
    keep[:, 3:] = False  # two padding positions per sequence
    padded = x.clone()
    padded[:, 3:] = 0.0
    real = masked_batch_norm(padded, keep)[:, :3]
    alone = masked_batch_norm(x[:, :3], torch.ones(4, 3, dtype=torch.bool))
    assert (real - alone).abs().max() < 1e-12  # padding no longer moves the real tokens
    assert cross_sample_effect(lambda b: masked_batch_norm(b, torch.ones(b.shape[:2], dtype=torch.bool)),
                               x, others) > 0.05  # the other sequences still do
    with pytest.raises(ValueError, match=r"others must be \(B - 1, T, d\)"):
        cross_sample_effect(bn, x, others[:2])
    with pytest.raises(ValueError, match="keep must be a bool tensor"):
        masked_batch_norm(x, keep.int())


def test_stack_variants_and_gradient_flow():
    from aiayn.experiments.normalization import (
        VARIANTS,
        decoder_gradient_flow,
        stack_variant,
        token_spread,
    )

    src, tgt = _batch(8)
    config = date_config(TOK, n_layers=4)
    models = {v: stack_variant(config, v).double() for v in VARIANTS}
    weights = [m.decoder.layers[0].self_attn.w_q.weight for m in models.values()]
    assert all(torch.equal(w, weights[0]) for w in weights)  # the same weights in all four
    assert models["Pre-LN"].config.norm_first
    assert not any(isinstance(m, nn.LayerNorm) for m in models["no LayerNorm"].decoder.layers.modules())
    x = torch.randn(2, 5, 64, dtype=torch.float64)
    layer = models["no residual"].encoder.layers[0]
    assert torch.allclose(layer(x), layer.norm2(layer.feed_forward(layer.norm1(layer.self_attn(x, x, x)))))
    flow = decoder_gradient_flow(models["Post-LN"], src, tgt)
    assert len(flow["layer_input"]) == 4 and len(flow["norm_gain"]) == len(flow["inv_scale"]) == 12
    assert all(0 < g < 1.5 for g in flow["norm_gain"])
    assert all(p.grad is None for p in models["Post-LN"].parameters())
    keep = src != TOK.pad_id
    with torch.no_grad():
        same = torch.ones(2, 5, 3, dtype=torch.float64)
        assert abs(token_spread(same, torch.ones(2, 5, dtype=torch.bool))) < 1e-12
        assert 0 < token_spread(models["Pre-LN"].encode(src), keep) <= 2
    with pytest.raises(ValueError, match="variant must be one of"):
        stack_variant(config, "Sandwich-LN")
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        stack_variant({}, "Post-LN")
    with pytest.raises(ValueError, match="keep must have shape"):
        token_spread(same, keep)


def test_train_warmup_run_is_the_recipe_with_a_factor():
    from aiayn.experiments.normalization import train_warmup_run

    config = date_config(TOK)
    ours, h = train_warmup_run(config, TOK, 3, warmup=5, batch=8)
    theirs, h2 = train_date_model(config, TOK, 3, warmup=5, batch=8)
    assert h["loss"] == h2["loss"]
    _, low = train_warmup_run(config, TOK, 3, warmup=5, ramp=False, batch=8, factor=0.1)
    assert low["lr"] == pytest.approx([0.1 * no_ramp_lr(s, 64, 5) for s in (1, 2, 3)])
    with pytest.raises(ValueError, match="factor must be positive"):
        train_warmup_run(config, TOK, 3, factor=0)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        train_warmup_run(config, TOK, 0)


def test_plot_architecture_writes_the_config_and_its_counts():
    import matplotlib.pyplot as plt

    from aiayn import TransformerConfig, count_parameters
    from aiayn.figures.encoder_decoder import plot_architecture

    for config in (TransformerConfig.base(), date_config(TOK, n_layers=3, norm_first=True)):
        fig = plot_architecture(config)
        texts = " ".join(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title])
        with torch.device("meta"):
            model = Transformer(config)
        for n in (count_parameters(model), count_parameters(model.encoder.layers[0]),
                  count_parameters(model.decoder.layers[0])):
            assert f"{n:,}" in texts
        assert f"N = {config.n_layers} ×" in texts and f"d_ff = {config.d_ff}" in texts
        assert f"h = {config.n_heads} heads" in texts and f"d_model = {config.d_model}" in texts
        plt.close(fig)
    assert "(Pre-LN)" in texts and "3,152,384" in " ".join(
        t.get_text() for t in plot_architecture(TransformerConfig.base()).axes[0].texts)
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        plot_architecture({"d_model": 512})
    plt.close("all")
