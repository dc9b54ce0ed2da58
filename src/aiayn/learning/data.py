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
    "DATE_FORMATS",
    "DATE_RANGE",
    "format_date",
    "is_test_date",
    "date_split",
    "date_pairs",
    "CharTokenizer",
    "date_tokenizer",
    "pad_batch",
    "date_batch",
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
    vocabulary has ``2 * n_symbols`` ids), and the target is ``s``. Attention that finds the
    marked position hands its value over undiluted; an equal-weight average mixes it with
    ``length - 1`` random symbols, though the twin's own embedding keeps the answer readable
    there too, more weakly.
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


# ------------------------------------ chapter 7: a translation task that needs reordering

#: Written forms of a date the date task draws from; every one is unambiguous.
DATE_FORMATS = (
    "29 November 2026",
    "Nov 29, 2026",
    "29/11/2026",
    "sunday, november 29th 2026",
    "2026.11.29",
    "29-NOV-2026",
    "Sun 29 Nov 2026",
)

#: The first and last dates of the date task (inclusive).
DATE_RANGE = ("1950-01-01", "2049-12-31")


def _ordinal_suffix(day: int) -> str:
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def format_date(day, form: int) -> str:
    """Write ``day`` (a :class:`datetime.date`) in written form ``form``, an index into
    :data:`DATE_FORMATS`. Month and weekday names are English, independent of the locale."""
    import calendar

    if not isinstance(form, int) or isinstance(form, bool) or not 0 <= form < len(DATE_FORMATS):
        raise ValueError(f"form must be an int in [0, {len(DATE_FORMATS) - 1}], got {form!r}")
    month = ("January", "February", "March", "April", "May", "June", "July", "August",
             "September", "October", "November", "December")[day.month - 1]
    weekday = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
               "Sunday")[calendar.weekday(day.year, day.month, day.day)]
    d, m, y = day.day, day.month, day.year
    forms = (
        f"{d} {month} {y}",
        f"{month[:3]} {d}, {y}",
        f"{d:02d}/{m:02d}/{y}",
        f"{weekday.lower()}, {month.lower()} {d}{_ordinal_suffix(d)} {y}",
        f"{y}.{m:02d}.{d:02d}",
        f"{d:02d}-{month[:3].upper()}-{y}",
        f"{weekday[:3]} {d} {month[:3]} {y}",
    )
    return forms[form]


def is_test_date(day) -> bool:
    """True for the about 3% of dates held out for testing (a fixed hash of the date).

    The split is by *date*, not by written form: a held-out date never appears in
    training in any of its forms, so a correct answer cannot be remembered."""
    return (day.toordinal() * 2654435761) % 2**32 % 100 < 3


def date_split(split: str) -> list:
    """All dates of :data:`DATE_RANGE` in ``split``: ``"train"`` or ``"test"``, in order."""
    import datetime

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    first, last = (datetime.date.fromisoformat(s) for s in DATE_RANGE)
    days = (first + datetime.timedelta(n) for n in range((last - first).days + 1))
    return [d for d in days if is_test_date(d) == (split == "test")]


def date_pairs(n: int, split: str = "train", seed: int = 0) -> list[tuple[str, str]]:
    """``n`` random ``(written date, ISO date)`` pairs from ``split``, reproducible from ``seed``.

    Each pair draws a date of the split and one of :data:`DATE_FORMATS` uniformly, e.g.
    ``("Nov 29, 2026", "2026-11-29")``."""
    import random

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = random.Random(f"{split}-{seed}")
    days = date_split(split)
    pairs = []
    for _ in range(n):
        day = rng.choice(days)
        pairs.append((format_date(day, rng.randrange(len(DATE_FORMATS))), day.isoformat()))
    return pairs


class CharTokenizer:
    """A character-level vocabulary: ids 0, 1, 2 are ``<pad>``, ``<bos>``, ``<eos>``,
    then one id per character of ``alphabet``.

    >>> tok = CharTokenizer("0123456789-")
    >>> tok.decode(tok.encode("2026-11-29"))
    '2026-11-29'
    """

    pad_id, bos_id, eos_id = 0, 1, 2
    specials = ("<pad>", "<bos>", "<eos>")

    def __init__(self, alphabet: str):
        if not isinstance(alphabet, str) or not alphabet:
            raise ValueError("alphabet must be a non-empty string of characters")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet must not repeat a character")
        self.alphabet = alphabet
        self.char_to_id = {c: i + len(self.specials) for i, c in enumerate(alphabet)}

    def __len__(self) -> int:
        return len(self.specials) + len(self.alphabet)

    def __repr__(self) -> str:
        return f"CharTokenizer({len(self)} ids: 3 specials + {len(self.alphabet)} characters)"

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> list[int]:
        """Ids of the characters of ``text``, optionally between ``<bos>`` and ``<eos>``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        unknown = [(i, c) for i, c in enumerate(text) if c not in self.char_to_id]
        if unknown:
            i, c = unknown[0]
            raise ValueError(
                f"character {c!r} at position {i} of {text!r} is not in the vocabulary "
                f"(known: {self.alphabet!r})"
            )
        ids = [self.char_to_id[c] for c in text]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def decode(self, ids) -> str:
        """The text of ``ids`` (a list or 1-D tensor): stops at ``<eos>``, skips ``<pad>``/``<bos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        chars = []
        for i in ids:
            if i == self.eos_id:
                break
            if i >= len(self.specials):
                if i >= len(self):
                    raise ValueError(f"id {i} is outside the vocabulary of {len(self)} ids")
                chars.append(self.alphabet[i - len(self.specials)])
        return "".join(chars)


def date_tokenizer() -> CharTokenizer:
    """The one shared vocabulary of the date task: every character of every form."""
    import datetime

    chars = set()
    day = datetime.date(2023, 1, 1)
    for n in range(366):  # every month and weekday name, every digit
        for form in range(len(DATE_FORMATS)):
            chars.update(format_date(day + datetime.timedelta(n), form))
    return CharTokenizer("".join(sorted(chars)))


def pad_batch(sequences: list[list[int]], pad_id: int = 0) -> torch.Tensor:
    """Right-pad lists of ids to one ``(B, max_len)`` int64 tensor."""
    if not sequences:
        raise ValueError("sequences must hold at least one sequence")
    width = max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def date_batch(
    pairs: list[tuple[str, str]], tokenizer: CharTokenizer, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tensors of ``pairs``: ``src`` ``(B, S)`` = text + ``<eos>``, and ``tgt`` ``(B, T)`` =
    ``<bos>`` + ISO date + ``<eos>``, both right-padded with ``tokenizer.pad_id``.

    Teacher forcing feeds ``tgt[:, :-1]`` to the decoder and predicts ``tgt[:, 1:]``."""
    src = pad_batch([tokenizer.encode(s) for s, _ in pairs], tokenizer.pad_id)
    tgt = pad_batch([tokenizer.encode(t, bos=True) for _, t in pairs], tokenizer.pad_id)
    return src.to(device), tgt.to(device)
