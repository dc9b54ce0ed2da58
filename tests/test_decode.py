import pytest
import torch

from aiayn import Transformer, TransformerConfig
from aiayn.learning.decode import (
    Decoded,
    beam_search,
    beam_search_batch,
    cross_attention,
    greedy_decode,
    length_penalty,
)
from aiayn.masks import causal_mask, padding_mask

BOS, EOS = 1, 2


def _model(norm_first=False, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab=13, tgt_vocab=13, d_model=16, n_heads=2, n_layers=2,
                            d_ff=32, dropout=0.1, max_len=40, norm_first=norm_first)
    return Transformer(cfg).to(dtype).eval()


def _src(batch=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 13, (batch, 7), generator=g)
    src[0, 5:] = 0  # padding in one row
    return src


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_cached_decoding_is_identical_to_uncached(norm_first, dtype, tol):
    model, src = _model(norm_first, dtype), _src()
    plain = greedy_decode(model, src, BOS, EOS, max_len=20)
    cached = greedy_decode(model, src, BOS, EOS, max_len=20, use_cache=True)
    assert torch.equal(plain.tokens, cached.tokens)
    assert (plain.logits - cached.logits).abs().max().item() < tol
    assert plain.n_decoder_calls == cached.n_decoder_calls == plain.logits.shape[1]


def test_decode_step_with_several_new_tokens_matches_decode():
    model, src = _model(), _src()
    memory_mask = padding_mask(src, 0)
    memory = model.encode(src, memory_mask)
    tgt = torch.randint(3, 13, (3, 6), generator=torch.Generator().manual_seed(2))
    full = model.decode(tgt, memory, memory_mask)
    caches = [{} for _ in range(2)]
    first = model.decode_step(tgt[:, :4], memory, caches, memory_mask)  # a prompt of 4
    rest = [model.decode_step(tgt[:, t : t + 1], memory, caches, memory_mask) for t in (4, 5)]
    assert torch.allclose(torch.cat([first, *rest], 1), full, atol=1e-5)
    assert caches[0]["self"]["k"].shape == (3, 2, 6, 8)  # (B, H, t, d_k)


def test_greedy_outputs_are_consistent():
    model, src = _model(), _src()
    out = greedy_decode(model, src, BOS, EOS, max_len=9, return_attention=True)
    assert isinstance(out, Decoded)
    steps = out.tokens.shape[1]
    assert steps <= 9 and out.probs.shape == (3, steps, 13)
    assert torch.allclose(out.probs.sum(-1), torch.ones(3, steps))
    assert torch.equal(out.probs.argmax(-1)[out.tokens != 0], out.tokens[out.tokens != 0])
    assert (out.token_probs <= out.probs.max(-1).values + 1e-7).all()
    assert len(out.cross_attention) == 2 and out.cross_attention[0].shape == (3, 2, steps, 7)
    assert (out.cross_attention[0][0, ..., 5:] == 0).all()  # source padding gets no attention
    # Each row is the same as when that source is decoded alone.
    alone = greedy_decode(model, src[1:2], BOS, EOS, max_len=9)
    n = alone.tokens.shape[1]
    assert torch.equal(alone.tokens[0], out.tokens[1, :n])


def test_greedy_stops_at_eos_and_pads_after_it():
    model, src = _model(), _src()

    def eos_for_row_0_at_step_2(module, args, logits):
        logits = logits.clone()
        logits[..., 5] += 1e4  # every row writes 5 ...
        if logits.shape[1] >= 2 or module.step_count >= 1:
            logits[0, -1, EOS] += 2e4  # ... row 0 ends at step 2
        module.step_count += 1
        return logits

    for use_cache in (False, True):
        model.generator.step_count = 0
        hook = model.generator.register_forward_hook(eos_for_row_0_at_step_2)
        out = greedy_decode(model, src, BOS, EOS, max_len=4, use_cache=use_cache)
        hook.remove()
        assert out.n_decoder_calls == 4  # rows 1 and 2 never end
        assert out.tokens[0].tolist() == [5, EOS, 0, 0]  # padding after <eos>
        assert out.tokens[1].tolist() == [5, 5, 5, 5]


def test_greedy_rejects_bad_input():
    with pytest.raises(TypeError, match="aiayn Transformer"):
        greedy_decode(torch.nn.Linear(2, 2), _src(), BOS, EOS)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        greedy_decode(_model(), _src(), BOS, EOS, max_len=0)


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert length_penalty(10, 0.0) == 1.0


def test_beam_size_one_is_greedy_and_wider_beams_score_no_worse():
    model, src = _model(seed=3), _src(1, seed=4)
    greedy = greedy_decode(model, src, BOS, EOS, max_len=12)
    hyps = beam_search(model, src, BOS, EOS, beam_size=1, max_len=12, alpha=0.0)
    tokens = greedy.tokens[0][greedy.tokens[0] != 0].tolist()
    assert hyps[0][0] == [t for t in tokens if t != EOS]

    def log_prob(hyp):  # log P(hyp [+ <eos> if it ended]) by teacher forcing
        ended = len(hyp) < 12
        tgt = torch.tensor([[BOS, *hyp, *[EOS] * ended]])
        memory_mask = padding_mask(src, 0)
        # Only the causal mask: a generated token may be the padding id.
        logits = model.decode(tgt[:, :-1], model.encode(src, memory_mask), memory_mask,
                              tgt_mask=causal_mask(tgt.shape[1] - 1))
        logp = torch.log_softmax(logits.double(), -1)
        return logp.gather(-1, tgt[:, 1:, None]).sum().item()

    best = {k: beam_search(model, src, BOS, EOS, beam_size=k, max_len=12, alpha=0.0)[0]
            for k in (1, 4)}
    for hyp, score in best.values():
        assert score == pytest.approx(log_prob(hyp), abs=1e-4)
    assert best[4][1] >= best[1][1] - 1e-9
    with pytest.raises(ValueError, match="one source at a time"):
        beam_search(model, _src(2), BOS, EOS)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batched_beam_search_equals_one_source_at_a_time(beam_size):
    model, src = _model(seed=5), _src(3, seed=6)  # row 0 is padded
    batched = beam_search_batch(model, src, BOS, EOS, beam_size=beam_size, max_len=10)
    for row, hyps in enumerate(batched):
        one = src[row : row + 1]
        one = one[:, : int((one != 0).sum())]  # the same source without its padding
        alone = beam_search(model, one, BOS, EOS, beam_size=beam_size, max_len=10)
        assert [h for h, _ in hyps] == [h for h, _ in alone]
        # float32: a padded batch rounds differently from one unpadded source
        assert [s for _, s in hyps] == pytest.approx([s for _, s in alone], abs=1e-5)
        assert len(hyps) <= beam_size
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        beam_search_batch(model, src, BOS, EOS, beam_size=0)



@pytest.mark.parametrize("beam_size", [1, 4])
def test_cached_beam_search_equals_uncached(beam_size):
    model, src = _model(seed=7, dtype=torch.float64), _src(4, seed=8)  # row 0 is padded
    plain = beam_search_batch(model, src, BOS, EOS, beam_size=beam_size, max_len=12)
    cached = beam_search_batch(model, src, BOS, EOS, beam_size=beam_size, max_len=12,
                               use_cache=True)
    assert [[h for h, _ in hyps] for hyps in cached] == [[h for h, _ in hyps] for hyps in plain]
    for a, b in zip(cached, plain, strict=True):
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-9)
    # The check bites: the beams of a source diverge, so their caches must be reordered.
    assert beam_size == 1 or any(len({tuple(h[:2]) for h, _ in hyps}) > 1 for hyps in plain)
    one = beam_search(model, src[1:2], BOS, EOS, beam_size=beam_size, max_len=12, use_cache=True)
    assert [h for h, _ in one] == [h for h, _ in plain[1]]


def test_cross_attention_rows_sum_to_one():
    model, src = _model(), _src()
    maps = cross_attention(model, src, torch.full((3, 4), BOS))
    assert all(torch.allclose(m.sum(-1), torch.ones(3, 2, 4)) for m in maps)
    # The hooks are gone afterwards.
    assert not model.decoder.layers[0].cross_attn._forward_hooks


def test_beam_search_trace_shows_every_step_and_changes_nothing():
    model, src = _model(seed=5, dtype=torch.float64), _src(1, seed=6)  # ends within max_len
    steps = []
    traced = beam_search(model, src, BOS, EOS, beam_size=3, max_len=12, alpha=0.6, trace=steps)
    assert traced == beam_search(model, src, BOS, EOS, beam_size=3, max_len=12, alpha=0.6)
    assert steps and all(set(step) == {"alive", "finished"} for step in steps)
    memory_mask = padding_mask(src, 0)
    memory = model.encode(src, memory_mask)

    def log_prob(tokens):  # teacher-forced log P of <bos> + tokens
        tgt = torch.tensor([[BOS, *tokens]])
        logits = model.decode(tgt[:, :-1], memory, memory_mask, tgt_mask=causal_mask(len(tokens)))
        return torch.log_softmax(logits, -1).gather(-1, tgt[:, 1:, None]).sum().item()

    for t, step in enumerate(steps, start=1):
        scores = [s for _, s in step["alive"]]
        assert len(scores) <= 3 and scores == sorted(scores, reverse=True)
        for tokens, logp in step["alive"]:
            assert len(tokens) == t and EOS not in tokens
            assert logp == pytest.approx(log_prob(tokens), abs=1e-9)
        for tokens, logp, score in step["finished"]:
            assert len(tokens) == t - 1
            assert logp == pytest.approx(log_prob([*tokens, EOS]), abs=1e-9)
            assert score == pytest.approx(logp / length_penalty(t, 0.6))
    ended = [(h, s) for step in steps for h, _, s in step["finished"]]
    assert all(hyp in ended for hyp in traced)
    batch = []
    beam_search_batch(model, _src(2, seed=8), BOS, EOS, beam_size=2, max_len=12, trace=batch)
    assert all(len(step) == 2 for step in batch)  # one entry per source
    with pytest.raises(TypeError, match="trace must be a list"):
        beam_search(model, src, BOS, EOS, trace=())


def test_translate_labels_every_decoded_id_even_specials():
    """An untrained model's beam may emit <pad> or <bos>: each still gets a label, so the
    characters and their confidences line up (chapter 7's figure draws one bar per id)."""
    from aiayn import Transformer
    from aiayn.learning.data import date_tokenizer
    from aiayn.learning.decode import translate
    from aiayn.learning.recipes import date_config

    tokenizer = date_tokenizer()
    torch.manual_seed(0)
    model = Transformer(date_config(tokenizer, n_layers=1, d_model=16, n_heads=2, d_ff=32)).eval()
    for beam in (1, 4, 8):
        result = translate(model, tokenizer, "Nov 29, 2026", beam)
        assert len(result["chars"]) == len(result["confidence"]) == result["attention"].shape[0]
