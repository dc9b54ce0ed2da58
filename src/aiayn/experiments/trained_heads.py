"""Attention in a trained model: what the heads of all-MiniLM-L6-v2 do.

The chapters' heads are trained on generated tasks; these measurements read the heads of a
real trained encoder (:mod:`aiayn.pretrained`, a 6-layer BERT running on the package's own
layers) on English sentences.

* :func:`word_to_head_weights`: for every layer and head, the weight from one word to others
  (words found through the tokenizer's word pieces).
* :func:`it_animal_street`: the classic coreference pair ("... because it was too tired" /
  "... too wide"): does any head send "it" to the noun it refers to?
* :func:`head_roles`: per head, the share of attention on the previous token, the next token,
  the token itself, ``[CLS]``, ``[SEP]`` and punctuation, the rows' entropy, and how much
  each varies across sentences; :data:`ROLE_SENTENCES` is a batch written for it.
* :func:`position_similarity`: the cosine similarity of the learned position embeddings,
  side by side with the paper's sinusoidal table at the same width.

Shapes: ``B`` sentences, ``L`` layers, ``H`` heads, ``T`` tokens. Layers and heads are
counted from 0.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..positional import sinusoidal_encoding
from ..pretrained import BertEncoder, SentenceTrace, trace_sentences

__all__ = [
    "word_pieces", "word_to_head_weights", "IT_SENTENCES", "ItAnimalStreet", "it_animal_street",
    "ROLES", "HeadRoles", "head_roles", "ROLE_SENTENCES", "PositionSimilarity",
    "position_similarity",
]

_SPECIAL = {"[CLS]", "[SEP]", "[PAD]"}


# ----------------------------------------------------------------------- words to pieces


def _piece(token: str) -> str:
    return token[2:] if token.startswith("##") else token


def word_pieces(tokens: list[str], word: str, occurrence: int = 0) -> list[int]:
    """The positions in ``tokens`` (one sentence's word pieces, ``[CLS]`` ... ``[SEP]``) of
    ``word``'s pieces, for its ``occurrence``-th appearance (0 = the first).

    Case is ignored, "##" continuation marks are joined ("tired" may be one piece,
    "unbelievable" several) and punctuation inside a word is matched as the tokenizer splits
    it ("didn't" = "didn", "'", "t"). A match must start and end on word boundaries, so "it"
    is not found inside "items". Raises ValueError naming the word if it is absent."""
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"word must be a non-empty string, got {word!r}")
    target = "".join(word.lower().split())
    found = []
    for start, token in enumerate(tokens):
        if token in _SPECIAL or token.startswith("##"):
            continue
        joined, end = "", start
        while end < len(tokens) and tokens[end] not in _SPECIAL and len(joined) < len(target):
            joined += _piece(tokens[end]).lower()
            end += 1
        next_is_piece = end < len(tokens) and tokens[end].startswith("##")
        if joined == target and not next_is_piece:
            found.append(list(range(start, end)))
    if len(found) <= occurrence:
        raise ValueError(f"word {word!r} not found in the tokens {tokens}"
                         + (f" ({len(found)} occurrences)" if found else ""))
    return found[occurrence]


def word_to_head_weights(trace: SentenceTrace, sentence_index: int, from_word: str,
                         to_words: list[str]) -> torch.Tensor:
    """``(L, H, len(to_words))``: every head's attention weight from ``from_word`` to each of
    ``to_words`` in sentence ``sentence_index`` of ``trace``.

    A target word's weight is the sum over its pieces (the share of the row it gets); if
    ``from_word`` has several pieces, their rows are averaged. Each word is its first
    occurrence. On the CPU, float32."""
    if not 0 <= sentence_index < len(trace.tokens):
        raise ValueError(f"sentence_index must be in [0, {len(trace.tokens) - 1}], "
                         f"got {sentence_index}")
    if isinstance(to_words, str) or not to_words:
        raise ValueError(f"to_words must be a non-empty list of words, got {to_words!r}")
    tokens = trace.tokens[sentence_index]
    queries = word_pieces(tokens, from_word)
    targets = [word_pieces(tokens, word) for word in to_words]
    out = []
    for layer in trace.attentions:  # each (B, H, T, T)
        rows = layer[sentence_index, :, queries].float().cpu()  # (H, q, T)
        out.append(torch.stack([rows[:, :, keys].sum(-1).mean(-1) for keys in targets], -1))
    return torch.stack(out)  # (L, H, len(to_words))


# ----------------------------------------------------------------------- "it"


#: The coreference pair, where "it" is the animal in the first sentence and the street in the
#: second.
IT_SENTENCES = (
    "The animal didn't cross the street because it was too tired.",
    "The animal didn't cross the street because it was too wide.",
)


@dataclass
class ItAnimalStreet:
    """Per head ``(L, H)``, the weight from "it" to "animal" and to "street" in the "tired"
    and the "wide" sentence of :data:`IT_SENTENCES`. Coreference would need "it" to look at
    the animal when it is tired and at the street when it is wide."""

    tired_animal: torch.Tensor  # (L, H)
    tired_street: torch.Tensor  # (L, H)
    wide_animal: torch.Tensor  # (L, H)
    wide_street: torch.Tensor  # (L, H)

    def weights(self, sentence: str, noun: str) -> torch.Tensor:
        """The ``(L, H)`` weights of ``sentence`` ("tired" or "wide") to ``noun``
        ("animal" or "street")."""
        if sentence not in ("tired", "wide") or noun not in ("animal", "street"):
            raise ValueError(f"sentence must be 'tired' or 'wide' and noun 'animal' or 'street', "
                             f"got {sentence!r}, {noun!r}")
        return getattr(self, f"{sentence}_{noun}")

    def top_heads(self, sentence: str, noun: str, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` heads that put the most weight on ``noun`` in ``sentence``:
        ``(layer, head, weight)``, largest first."""
        w = self.weights(sentence, noun)
        values, flat = w.flatten().topk(min(k, w.numel()))
        n_heads = w.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(v)) for v, i in zip(values, flat, strict=True)]

    def preference(self, sentence: str) -> torch.Tensor:
        """``(L, H)``: weight on "animal" minus weight on "street" (> 0: prefers the animal)."""
        return self.weights(sentence, "animal") - self.weights(sentence, "street")

    def switching_heads(self, min_weight: float = 0.0) -> list[tuple[int, int, str]]:
        """The heads whose preferred noun differs between the two sentences, with at least
        ``min_weight`` on the preferred noun in both: ``(layer, head, direction)``, where
        direction is "coreference" (animal when tired, street when wide) or "reversed"."""
        tired, wide = self.preference("tired"), self.preference("wide")
        top_tired = torch.maximum(self.tired_animal, self.tired_street)
        top_wide = torch.maximum(self.wide_animal, self.wide_street)
        switched = (tired > 0) != (wide > 0)
        strong = (top_tired >= min_weight) & (top_wide >= min_weight)
        return [(int(layer), int(head), "coreference" if tired[layer, head] > 0 else "reversed")
                for layer, head in (switched & strong).nonzero().tolist()]


def it_animal_street(model: BertEncoder, tokenizer: Any) -> ItAnimalStreet:
    """Run the two sentences of :data:`IT_SENTENCES` and read, for every head, the weight
    from "it" to "animal" and to "street" (:func:`word_to_head_weights`)."""
    trace = trace_sentences(model, tokenizer, list(IT_SENTENCES))
    tired = word_to_head_weights(trace, 0, "it", ["animal", "street"])  # (L, H, 2)
    wide = word_to_head_weights(trace, 1, "it", ["animal", "street"])
    return ItAnimalStreet(tired[..., 0], tired[..., 1], wide[..., 0], wide[..., 1])


# ----------------------------------------------------------------------- head roles


#: What :func:`head_roles` measures, in order: where a query's attention goes.
ROLES = ("previous", "next", "self", "cls", "sep", "punctuation")


@dataclass
class HeadRoles:
    """Per layer and head: ``shares[role]`` ``(L, H)``, the mean share of a query's attention
    on each of :data:`ROLES` over the real query tokens of a batch where the role means
    something (:func:`head_roles`); ``spread[role]`` ``(L, H)``,
    the standard deviation over sentences of the per-sentence mean (small = a stable habit);
    ``entropy`` and ``entropy_spread`` ``(L, H)``, the same for the rows' entropy (nats);
    ``by_sentence[role]`` ``(B, L, H)``, each sentence's mean share."""

    shares: dict[str, torch.Tensor]
    spread: dict[str, torch.Tensor]
    entropy: torch.Tensor
    entropy_spread: torch.Tensor
    n_tokens: int  # real query tokens in the batch
    by_sentence: dict[str, torch.Tensor]

    def dominant(self, threshold: float = 0.5) -> list[tuple[int, int, str, float]]:
        """Heads with one role taking at least ``threshold`` of their attention:
        ``(layer, head, role, share)``, in layer and head order."""
        stacked = torch.stack([self.shares[r] for r in ROLES])  # (roles, L, H)
        best, which = stacked.max(dim=0)
        return [(layer, head, ROLES[int(which[layer, head])], float(best[layer, head]))
                for layer, head in (best >= threshold).nonzero().tolist()]


def _is_punctuation(token: str) -> bool:
    return token not in _SPECIAL and all(ch in string.punctuation for ch in _piece(token))


def _punctuation(tokens: list[list[str]], length: int) -> torch.Tensor:
    """``(B, T)`` bool: the tokens made only of punctuation (padding is False)."""
    punct = torch.zeros(len(tokens), length, dtype=torch.bool)
    for b, sentence in enumerate(tokens):
        punct[b, : len(sentence)] = torch.tensor([_is_punctuation(t) for t in sentence])
    return punct


def _role_keys(tokens: list[list[str]], punct: torch.Tensor) -> dict[str, torch.Tensor]:
    """For each role, a ``(B, T, T)`` bool: which keys of each query count for it."""
    n, length = punct.shape
    idx = torch.arange(length)
    query, key = idx[:, None], idx[None, :]  # (T, 1), (1, T)
    lengths = torch.tensor([len(t) for t in tokens])[:, None, None]  # (B, 1, 1)
    real_key = key[None] < lengths  # (B, 1, T)
    full = (n, length, length)
    return {
        "previous": (key == query - 1).expand(full),
        "next": ((key == query + 1) & real_key).expand(full),
        "self": (key == query).expand(full),
        "cls": (key == 0).expand(full),
        "sep": (key[None] == lengths - 1).expand(full),
        "punctuation": punct[:, None, :].expand(full),
    }


def _role_queries(punct: torch.Tensor, real: torch.Tensor) -> dict[str, torch.Tensor]:
    """For each role, a ``(B, T)`` bool: the real queries whose share for it means something.

    A query that is itself the role's key would meet the role by default (``[CLS]`` on
    ``[CLS]``), and one with no such key could not meet it (``[CLS]`` has no previous token);
    both are left out of the role's average."""
    length = real.shape[1]
    position = torch.arange(length)[None, :]  # (1, T)
    last = real.sum(-1, keepdim=True) - 1  # (B, 1): the [SEP] position
    return {
        "previous": real & (position > 0),
        "next": real & (position < last),
        "self": real,
        "cls": real & (position > 0),
        "sep": real & (position < last),
        "punctuation": real & ~punct,
    }


def _per_sentence(values: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """``(B, H, T)`` per query -> ``(B, H)`` mean over each sentence's counted queries."""
    weights = queries[:, None, :].to(values.dtype)  # (B, 1, T)
    return (values * weights).sum(-1) / weights.sum(-1)


def head_roles(trace: SentenceTrace) -> HeadRoles:
    """Where each head's attention goes, over every real query token of ``trace``.

    A query's share for a role is the sum of its weights on the role's keys: "previous" and
    "next" the neighbouring tokens (none for ``[CLS]``'s previous or ``[SEP]``'s next),
    "self" the query itself, "cls" and "sep" the sentence's ``[CLS]`` and ``[SEP]``,
    "punctuation" every token made only of punctuation. A role's share is averaged over the
    queries where it means something (``_role_queries``: not ``[CLS]`` for "previous" and
    "cls", not ``[SEP]`` for "next" and "sep", no punctuation query for "punctuation"), each
    counted once; the entropy over all real queries. The spread is the standard deviation
    over sentences of each sentence's mean (0 for a single sentence)."""
    real = trace.mask  # (B, T)
    length = real.shape[1]
    punct = _punctuation(trace.tokens, length)  # (B, T)
    keys = _role_keys(trace.tokens, punct)
    queries = _role_queries(punct, real)
    shares, spread, entropy, entropy_spread = {r: [] for r in ROLES}, {r: [] for r in ROLES}, [], []
    by_sentence = {r: [] for r in ROLES}

    def summarise(per_query: torch.Tensor, counted: torch.Tensor):
        per_sentence = _per_sentence(per_query, counted)  # (B, H)
        n = counted.sum(-1).double()[:, None]  # (B, 1): queries counted per sentence
        pooled = (per_sentence * n).sum(0) / n.sum()
        return pooled.float(), per_sentence.std(dim=0, correction=0).float(), per_sentence.float()

    for layer in trace.attentions:  # (B, H, T, T), padded rows and columns are 0
        a = layer.double().cpu()
        for role in ROLES:
            per_query = (a * keys[role][:, None]).sum(-1)  # (B, H, T)
            mean, std, each = summarise(per_query, queries[role])  # (H,), (H,), (B, H)
            shares[role].append(mean)
            spread[role].append(std)
            by_sentence[role].append(each)  # (B, H)
        mean, std, _ = summarise(-torch.special.xlogy(a, a).sum(-1), real)
        entropy.append(mean)
        entropy_spread.append(std)
    return HeadRoles({r: torch.stack(v) for r, v in shares.items()},
                     {r: torch.stack(v) for r, v in spread.items()},
                     torch.stack(entropy), torch.stack(entropy_spread), int(real.sum()),
                     {r: torch.stack(v, dim=1) for r, v in by_sentence.items()})


#: Sentences for :func:`head_roles`, written for the chapter: short and long, questions,
#: lists, numbers and quotes, so that a head's habit is not one sentence's accident.
ROLE_SENTENCES = (
    "Rain fell all night.",
    "Where did you leave the keys?",
    "She bought apples, pears, two melons and a bag of walnuts.",
    "The train to Lyon leaves at 7:45 from platform 12.",
    "\"Close the door,\" he said, \"before the cat gets out.\"",
    "Nobody expected the quiet student to win the chess tournament.",
    "Is it true that octopuses have three hearts?",
    "We measured 3.2 litres in the first jar and 4.7 in the second.",
    "After the storm, the fishermen repaired their nets and counted the missing boats.",
    "Why would anyone paint a bridge bright orange?",
    "My grandmother kept every letter she ever received, sorted by year.",
    "The recipe needs flour, butter, sugar, eggs and a pinch of salt.",
    "In 1969, two astronauts walked on the Moon while a third waited in orbit.",
    "\"I'm not lost,\" the tourist insisted, holding the map upside down.",
    "Turn left at the bakery, then walk straight for about 200 metres.",
    "Can machines understand a joke, or only predict the next word?",
    "The committee met on Tuesday; the decision was postponed again.",
    "Her new phone cost $899, which she thought was far too much.",
    "Cats sleep.",
    "Although the bridge looked old, engineers found that its steel was still sound.",
    "What time does the museum open on Sundays?",
    "The children built a snowman, a snow fort and, eventually, a snow dragon.",
    "He read the sentence twice, then a third time, and still could not parse it.",
    "Only 4 of the 25 seeds we planted in March have sprouted.",
    "The old lighthouse keeper said: \"Storms never warn you politely.\"",
    "Please send the report, the invoices and the signed contract by Friday.",
    "If the river rises another metre, the village will have to be evacuated.",
    "Do you prefer tea or coffee in the morning?",
    "A translation model reads a whole sentence before it writes the first word.",
    "The score was 3-2 after extra time, and the fans stayed until midnight.",
    "Birds that migrate thousands of kilometres navigate by the stars, the sun and "
    "Earth's magnetic field.",
    "Who wrote this note, and why is it signed only with the letter K?",
)


# ----------------------------------------------------------------------- positions


@dataclass
class PositionSimilarity:
    """Cosine similarity between the first ``n`` positions' vectors: ``learned`` ``(n, n)``
    (the model's learned position embeddings) and ``sinusoidal`` ``(n, n)`` (the paper's table
    at the model's ``d_model``); ``summary[name][k]``, the mean similarity of positions ``k``
    apart, for each offset of ``offsets``."""

    learned: torch.Tensor  # (n, n)
    sinusoidal: torch.Tensor  # (n, n)
    offsets: tuple[int, ...]
    summary: dict[str, dict[int, float]]


def _cosine_matrix(table: torch.Tensor) -> torch.Tensor:
    unit = F.normalize(table.double(), dim=-1)  # (n, d)
    return (unit @ unit.T).float()  # (n, n)


def _mean_at_offsets(similarity: torch.Tensor, offsets: tuple[int, ...]) -> dict[int, float]:
    return {k: float(similarity.diagonal(offset=k).mean()) for k in offsets}


def position_similarity(model: BertEncoder, n: int = 128,
                        offsets: tuple[int, ...] = (1, 8, 32)) -> PositionSimilarity:
    """The cosine-similarity matrices of ``model``'s first ``n`` learned position embeddings
    and of the sinusoidal table at the same ``d_model``, and their mean at ``offsets``."""
    if not isinstance(model, BertEncoder):
        raise TypeError(f"model must be a BertEncoder, got {type(model).__name__}")
    max_len, d_model = model.config.max_len, model.config.d_model
    if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= max_len:
        raise ValueError(f"n must be an int in [2, {max_len}], got {n!r}")
    if not offsets or any(not isinstance(k, int) or not 0 <= k < n for k in offsets):
        raise ValueError(f"offsets must be ints in [0, {n - 1}], got {offsets!r}")
    learned = _cosine_matrix(model.embedding.positions.table.detach()[:n].cpu())
    sinusoidal = _cosine_matrix(sinusoidal_encoding(n, d_model, torch.float64))
    offsets = tuple(offsets)
    summary = {"learned": _mean_at_offsets(learned, offsets),
               "sinusoidal": _mean_at_offsets(sinusoidal, offsets)}
    return PositionSimilarity(learned, sinusoidal, offsets, summary)
