"""Winograd-style minimal pairs (chapter 10): does a head of a trained model send a pronoun to
the noun it refers to?

A pair is two sentences that differ only at the end, so that "it" means the first noun in one
and the second noun in the other ("The trophy didn't fit in the suitcase because it was too big"
/ "... too small"); Levesque et al. (2012) made such pairs a test of what a reader understands.
A head that resolved the pronoun would move its weight with the referent. In every pair the
first sentence's referent is the first noun (the subject), the second's the second noun; every
second pair swaps the two nouns' places, so that a head that prefers one noun for what it is
(the animate one, say) shows up as well as one that prefers the first noun. The pronoun read is
the first "it" of each sentence.

Shapes: ``P`` pairs, ``L`` layers, ``H`` heads. Layers and heads are counted from 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..pretrained import BertEncoder, trace_sentences
from .trained_heads import word_to_head_weights

__all__ = ["PRONOUN_PAIRS", "PronounPairs", "pronoun_pairs"]

#: ``(sentence where "it" is the first noun, sentence where it is the second, first noun,
#: second noun)``. Each pair is followed by the same two nouns in swapped places; the first pair
#: is chapter 10's "animal" / "street" sentence.
PRONOUN_PAIRS = (
    ("The animal didn't cross the street because it was too tired.",
     "The animal didn't cross the street because it was too wide.", "animal", "street"),
    ("The street was too much for the animal because it was too wide.",
     "The street was too much for the animal because it was too tired.", "street", "animal"),
    ("The animal didn't cross the road because it was too tired.",
     "The animal didn't cross the road because it was too wide.", "animal", "road"),
    ("The road was too much for the animal because it was too wide.",
     "The road was too much for the animal because it was too tired.", "road", "animal"),
    ("The trophy didn't fit in the suitcase because it was too big.",
     "The trophy didn't fit in the suitcase because it was too small.", "trophy", "suitcase"),
    ("The suitcase could not hold the trophy because it was too small.",
     "The suitcase could not hold the trophy because it was too big.", "suitcase", "trophy"),
    ("The bottle didn't fit in the box because it was too big.",
     "The bottle didn't fit in the box because it was too small.", "bottle", "box"),
    ("The box could not hold the bottle because it was too small.",
     "The box could not hold the bottle because it was too big.", "box", "bottle"),
    ("The fish ate the worm because it was hungry.",
     "The fish ate the worm because it was tasty.", "fish", "worm"),
    ("The worm was eaten by the fish because it was tasty.",
     "The worm was eaten by the fish because it was hungry.", "worm", "fish"),
)


def _check_margin(margin: float) -> None:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a number in [0, 1), got {margin!r}")


@dataclass
class PronounPairs:
    """Per pair, sentence (0: "it" is the first noun, 1: the second) and head, the weight from
    "it" to the ``first`` and to the ``second`` noun: ``(P, 2, L, H)`` each."""

    first: torch.Tensor
    second: torch.Tensor

    def lead(self) -> torch.Tensor:
        """``(P, 2, L, H)``: weight on the first noun minus weight on the second."""
        return self.first - self.second

    def follows_referent(self, margin: float) -> torch.Tensor:
        """``(P, L, H)`` bool: in both sentences of the pair, the head gives the noun that "it"
        means at least ``margin`` more weight than the other noun."""
        _check_margin(margin)
        lead = self.lead()
        return (lead[:, 0] >= margin) & (-lead[:, 1] >= margin)

    def stays(self, margin: float) -> torch.Tensor:
        """``(P, L, H)``: +1 where the head gives the first noun at least ``margin`` more in
        both sentences, -1 where it gives the second noun that much more in both, else 0. A
        head that stays ignores the referent."""
        _check_margin(margin)
        lead = self.lead()
        on_first = (lead >= margin).all(dim=1)
        on_second = (-lead >= margin).all(dim=1)
        return on_first.int() - on_second.int()


def pronoun_pairs(
    model: BertEncoder, tokenizer: Any, pairs: tuple = PRONOUN_PAIRS
) -> PronounPairs:
    """Run both sentences of every pair and read each head's weight from "it" to the two
    nouns (:func:`~aiayn.experiments.trained_heads.word_to_head_weights`)."""
    if not pairs:
        raise ValueError("pairs must hold at least one (sentence, sentence, noun, noun) pair")
    sentences = [sentence for a, b, _, _ in pairs for sentence in (a, b)]
    trace = trace_sentences(model, tokenizer, sentences)
    weights = torch.stack([
        torch.stack([word_to_head_weights(trace, 2 * p + s, "it", [first, second])
                     for s in (0, 1)])
        for p, (_, _, first, second) in enumerate(pairs)
    ])  # (P, 2, L, H, 2)
    return PronounPairs(weights[..., 0], weights[..., 1])
