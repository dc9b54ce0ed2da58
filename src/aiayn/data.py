"""Generated tasks for the chapters. No downloads: every data set is generated, seeded
and reproducible."""

from __future__ import annotations

import torch

__all__ = [
    "IGNORE_INDEX",
    "recall_task",
    "marked_token_task",
    "two_relation_task",
    "two_relation_labels",
    "previous_token_task",
]


# ------------------------------------------------ chapter 5: a task where position matters

#: Target id that :func:`torch.nn.functional.cross_entropy` skips by default.
IGNORE_INDEX = -100


def previous_token_task(
    batch_size: int,
    length: int,
    vocab_size: int,
    offset: int = 1,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens; the target at position ``p`` is the token at ``p - offset``.

    Content alone cannot solve it: every token is drawn uniformly from ``[0, vocab_size)``,
    so a model must find *which* position is ``offset`` to the left, a purely relative
    question. The first ``offset`` positions have no such token and get ``IGNORE_INDEX``.
    Returns ``(inputs, targets)``, both ``(batch_size, length)`` int64.
    """
    for name, value in (("batch_size", batch_size), ("length", length),
                        ("vocab_size", vocab_size), ("offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if length <= offset:
        raise ValueError(f"length must exceed offset={offset} (else nothing to predict), got {length}")
    inputs = torch.randint(vocab_size, (batch_size, length), generator=generator)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, offset:] = inputs[:, :-offset]  # shift right by `offset`
    return inputs.to(device), targets.to(device)


# ------------------------------------------- chapter 3: a task that needs a sharp lookup


def marked_token_task(
    batch_size: int,
    length: int,
    n_symbols: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random symbols, one of them marked; the target is the marked symbol.

    Every position holds a symbol in ``[0, n_symbols)``; at one random position per
    row the symbol ``s`` is replaced by its marked twin ``s + n_symbols`` (so the
    vocabulary has ``2 * n_symbols`` ids), and the target is ``s``. An average of all
    positions mixes the answer with ``length - 1`` random symbols, so a model must
    attend to the marked position: the scores decide the answer.
    Returns ``(tokens, targets)``: ``(batch_size, length)`` and ``(batch_size,)`` int64.
    """
    for name, value in (("batch_size", batch_size), ("length", length),
                        ("n_symbols", n_symbols)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    tokens = torch.randint(n_symbols, (batch_size, length), generator=generator)
    marked = torch.randint(length, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    targets = tokens[rows, marked].clone()
    tokens[rows, marked] += n_symbols  # the marked twin of the same symbol
    return tokens.to(device), targets.to(device)


def recall_task(
    batch_size: int,
    seq_len: int,
    n_symbols: int,
    max_offset: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Long-range recall (chapter 1): name the symbol ``k`` steps back.

    Each sequence holds ``seq_len`` random symbols ``0 .. n_symbols - 1`` followed by one
    question token ``n_symbols + k - 1`` that asks for the symbol ``k`` positions before
    it, ``k`` drawn uniformly from ``1 .. max_offset``. The vocabulary therefore has
    ``n_symbols + max_offset`` tokens, and guessing scores ``1 / n_symbols``.

    Returns ``(tokens, targets, offsets)``: ``(B, seq_len + 1)`` token ids, the ``(B,)``
    symbols asked for, and the ``(B,)`` offsets ``k``. Generated on the CPU from
    ``generator`` (the same numbers on every device), then moved to ``device``.
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len),
                        ("n_symbols", n_symbols), ("max_offset", max_offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if max_offset > seq_len:
        raise ValueError(
            f"max_offset ({max_offset}) must be at most seq_len ({seq_len}): "
            "the question cannot point before the first symbol"
        )
    symbols = torch.randint(n_symbols, (batch_size, seq_len), generator=generator)
    offsets = torch.randint(1, max_offset + 1, (batch_size,), generator=generator)
    question = n_symbols + offsets - 1  # one question token per offset
    tokens = torch.cat([symbols, question[:, None]], dim=1)  # (B, seq_len + 1)
    # The question sits at position seq_len; k steps back is position seq_len - k.
    targets = symbols.gather(1, (seq_len - offsets)[:, None])[:, 0]  # (B,)
    return tokens.to(device), targets.to(device), offsets.to(device)


# ------------------------------- chapter 4: a task that needs two relations at once


def two_relation_task(
    batch_size: int,
    n_keys: int = 6,
    n_values: int = 4,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs of keyed tokens; each target needs the previous token AND the matching one.

    A sequence has ``T = 2 * n_keys`` tokens: every key ``0 .. n_keys - 1`` appears
    exactly twice, in random order, and every token also carries a random value
    ``0 .. n_values - 1`` (token id ``key * n_values + value``, printed e.g. ``C2``). The
    target at position ``t`` is the pair (value of the token at ``t - 1``, value of the
    *other* token with the same key), as one class ``prev * n_values + match`` out of
    ``n_values ** 2``. So each prediction needs two different lookups: one by position
    (offset -1) and one by content (the same key). Position 0 has no previous token and
    gets ``IGNORE_INDEX``. Generated on the CPU from ``generator``, then moved to ``device``.

    Returns ``(tokens, targets, matching)``, each ``(batch_size, 2 * n_keys)`` int64:
    token ids, target classes, and the position of each token's match.
    """
    for name, value in (("batch_size", batch_size), ("n_keys", n_keys),
                        ("n_values", n_values)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_keys < 2:
        raise ValueError(f"n_keys must be at least 2 (a sequence of one pair is trivial), got {n_keys}")
    length = 2 * n_keys
    order = torch.rand(batch_size, length, generator=generator).argsort(dim=1)  # random permutations
    keys = torch.arange(n_keys).repeat(2)[order]  # (B, T): each key twice
    values = torch.randint(n_values, (batch_size, length), generator=generator)
    same_key = keys[:, :, None] == keys[:, None, :]  # (B, T, T)
    same_key &= ~torch.eye(length, dtype=torch.bool)  # the *other* occurrence, not itself
    matching = same_key.int().argmax(dim=-1)  # (B, T): exactly one True per row
    previous = values.roll(1, dims=1)  # (B, T): value at t - 1 (wraps at t = 0, ignored)
    targets = previous * n_values + values.gather(1, matching)
    targets[:, 0] = IGNORE_INDEX
    tokens = keys * n_values + values
    return tokens.to(device), targets.to(device), matching.to(device)


def two_relation_labels(tokens: torch.Tensor, n_values: int = 4) -> list[str]:
    """Readable names of one row of :func:`two_relation_task` tokens: key letter + value,
    e.g. ``[A3, C0, A1, ...]``."""
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be one row (T,), got shape {tuple(tokens.shape)}")
    ids = tokens.tolist()
    if any(i < 0 or i // n_values >= 26 for i in ids):
        raise ValueError("tokens must be ids key * n_values + value with key < 26")
    return [f"{chr(ord('A') + i // n_values)}{i % n_values}" for i in ids]
