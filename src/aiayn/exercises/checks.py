"""Check your answer: compare a reader's own function with the package's, and name the mistake.

Each ``check_*`` function calls the reader's attempt on several inputs (edge cases
included), compares it with the package, and returns a :class:`Verdict`: ``ok`` and one
sentence. When the attempt is wrong, the sentence names the first known mistake whose
output the attempt reproduces (softmax over the wrong axis, a missing scale, a mask off by
one, ...), or else says where and by how much the outputs differ. A notebook shows the
sentence; ``verdict = check_attention(my_attention); assert verdict, verdict`` stops with it
(a bare ``assert check_attention(...)`` stops too, but Python then shows no message).
Every call gets its own copy of the inputs, so an attempt that changes them in place cannot
spoil the comparison.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..learning.training import noam_lr
from ..masks import causal_mask
from ..positional import sinusoidal_encoding

__all__ = [
    "Verdict", "check_attention", "check_causal_mask", "check_positional_encoding",
    "check_split_heads", "check_noam_lr",
]

Mistakes = list[tuple[Callable, str]]


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: ``ok``, and one sentence saying what agrees or what differs."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, printer, cycle) -> None:  # how IPython shows it
        printer.text(self.message)


def _tolerance(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(rtol, atol): float64 round-off, or float32's when either is float32 (an attempt in
    PyTorch's default dtype is right if it is right to float32's precision). Half precision is
    refused before this (:func:`_compare`): its round-off would hide real mistakes."""
    eps = max((torch.finfo(t.dtype).eps for t in (a, b) if t.is_floating_point()), default=0.0)
    eps = min(eps, torch.finfo(torch.float32).eps)
    return max(1e-6, 100 * eps), max(1e-8, 100 * eps)


def _same(a, b) -> bool:
    """Equal shapes and values (to the precision of the coarser dtype), NaN where the other has NaN."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    rtol, atol = _tolerance(a, b)
    return bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True))


def _compare(name: str, cases: dict, attempt: Callable, reference: Callable,
             mistakes: Mistakes, what: str, where: Callable | None = None) -> Verdict:
    """Run every case; on the first disagreement, name the mistake the attempt reproduces.

    ``where(index)`` names an entry of the result in the message (default: its index)."""
    for case, args in cases.items():
        try:
            result = attempt(*copy.deepcopy(args))  # a copy: the attempt may change its inputs
        except Exception as error:  # the reader's code: any failure is the answer
            batched = any(isinstance(a, torch.Tensor) and a.dim() > 2 for a in args)
            shapes = any(word in str(error) for word in ("must match the size", "cannot be multiplied"))
            hint = (" (this case has leading batch and head dimensions: transpose the last two "
                    "axes, k.transpose(-2, -1), not k.T)" if batched and shapes else "")
            return Verdict(False, f"{name} raised {type(error).__name__} on the case "
                                  f"'{case}': {error}{hint}")
        pieces = isinstance(result, (tuple, list)) and any(isinstance(r, torch.Tensor) for r in result)
        if pieces:
            return Verdict(False, f"On the case '{case}': the result is a {type(result).__name__} "
                                  f"of {len(result)} tensors, not one tensor: stack them "
                                  f"(torch.stack) along the axis they should form.")
        if not isinstance(result, torch.Tensor):  # a NumPy array, nested lists: not for the package
            what_it_is = ("a NumPy array" if type(result).__module__.split(".")[0] == "numpy"
                          else f"a {type(result).__name__}")
            return Verdict(False, f"On the case '{case}': the result is {what_it_is}, not a "
                                  f"torch.Tensor: the package's functions take tensors (build it "
                                  f"with torch, or wrap it with torch.as_tensor).")
        got = result
        if got.dtype in (torch.float16, torch.bfloat16):
            return Verdict(False, f"On the case '{case}': the result is {got.dtype}, whose "
                                  f"round-off would hide real mistakes: compute in float32 or "
                                  f"float64 for this check.")
        expected = reference(*copy.deepcopy(args))
        if _same(got, expected):
            continue
        for mistake, message in mistakes:
            if _same(got, mistake(*copy.deepcopy(args))):
                return Verdict(False, f"On the case '{case}': {message}")
        if got.shape != expected.shape:
            return Verdict(False, f"On the case '{case}': the result has shape "
                                  f"{tuple(got.shape)}, expected {tuple(expected.shape)}.")
        if got.dtype != expected.dtype and torch.bool in (got.dtype, expected.dtype):
            return Verdict(False, f"On the case '{case}': the result has dtype {got.dtype}, "
                                  f"expected {expected.dtype} with these entries:\n{expected}.")
        if got.dtype == torch.bool:
            return Verdict(False, f"On the case '{case}': the entries differ from {what}, which "
                                  f"gives\n{expected.int()}\nwhere yours gives\n{got.int()}.")
        rtol, atol = _tolerance(got, expected)
        got, expected = got.double(), expected.double()
        # The entry furthest outside the tolerance of _same.
        excess = ((got - expected).abs() / (atol + rtol * expected.abs())).nan_to_num(float("inf"))
        index = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        at = where(index) if where else f"index {index}"
        if not torch.isfinite(got[index]):
            return Verdict(False, f"On the case '{case}': the result is NaN or infinite at "
                                  f"{at}, where {what} gives {expected[index]:.4g}.")
        mine, theirs = got[index].item(), expected[index].item()
        return Verdict(False, f"On the case '{case}': differs from {what}: at {at} yours gives "
                              f"{mine:.9g} where it gives {theirs:.9g} (a difference of "
                              f"{abs(mine - theirs):.2g}).")
    return Verdict(True, f"Correct: agrees with {what} on all {len(cases)} cases.")


# ----------------------------------------------------------------- attention (chapter 2)

def _attention_cases() -> dict:
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    no_key = torch.tensor([[True, True, False], [False, False, False]])  # row 1: no key
    padding = torch.tensor([True, True, True, False, False])[None, None, None, :]
    return {
        "one query, d_k=4": (rand(1, 4), rand(3, 4), rand(3, 2), None),
        "T=3, S=5, d_k=4, d_v=2": (rand(3, 4), rand(5, 4), rand(5, 2), None),
        "batch of 2, 3 heads, causal mask": (rand(2, 3, 4, 8), rand(2, 3, 4, 8),
                                             rand(2, 3, 4, 6), causal_mask(4)),
        "padding mask, last 2 keys blocked": (rand(1, 2, 4, 8), rand(1, 2, 5, 8),
                                              rand(1, 2, 5, 3), padding),
        "a query whose keys are all masked": (rand(2, 4), rand(3, 4), rand(3, 2), no_key),
    }


def _softmax_attention(q, k, v, mask, scale, dim=-1, fill=float("-inf"), keep_empty=False,
                       open_empty=False):
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, S)
    if mask is not None and open_empty:  # a row with no visible key may see every key
        mask = mask | ~mask.any(-1, keepdim=True)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and not keep_empty:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v


def check_attention(attention: Callable) -> Verdict:
    """Check ``attention(q, k, v, mask)`` against Eq. 1, :func:`~aiayn.attention.scaled_dot_product_attention`.

    ``q``, ``k``, ``v`` are ``(..., T, d_k)``, ``(..., S, d_k)``, ``(..., S, d_v)`` float64;
    ``mask`` is None or boolean, True = may attend, broadcasting to ``(..., T, S)``. The
    attempt returns the output, ``(..., T, d_v)``, or ``(output, weights)``. A query with no
    visible key must get zeros, as in the package.
    """
    def rooted(q):
        return 1 / math.sqrt(q.shape[-1])

    mistakes = [
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, 1.0),
         "it matches softmax(Q K^T) V without the scale: divide the scores by sqrt(d_k)."),
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, 1 / q.shape[-1]),
         "it divides the scores by d_k; Eq. 1 divides them by sqrt(d_k)."),
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, rooted(q), dim=-2),
         "the weights' columns sum to 1, not their rows: take the softmax over the last "
         "axis (the keys)."),
        (lambda q, k, v, m: _softmax_attention(q, k, v, None, rooted(q)),
         "masked keys get weight: set their scores to -inf before the softmax."),
        *[(lambda q, k, v, m, empty=empty: _softmax_attention(
            q, k, v, None if m is None else ~m, rooted(q), keep_empty=empty),
           "it attends to the blocked keys only: True in the mask means 'may attend', so fill "
           "the scores where the mask is False.") for empty in (False, True)],
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, rooted(q), keep_empty=True),
         "a query whose keys are all masked gets NaN: give it zeros, as aiayn does."),
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, rooted(q), open_empty=True,
                                               keep_empty=True),
         "a query whose keys are all masked attends to every key: give it zeros (unmask "
         "its row to avoid NaN if you like, but zero its output afterwards)."),
        (lambda q, k, v, m: _softmax_attention(q, k, v, m, rooted(q), fill=-1e9,
                                               keep_empty=True),
         "a query whose keys are all masked gets uniform weights over the keys it must "
         "ignore (a large negative fill, not -inf): give it zeros."),
    ]
    def output_of(q, k, v, mask):
        got = attention(q, k, v, mask)
        return got[0] if isinstance(got, (tuple, list)) else got  # (output, weights): the output

    return _compare("attention", _attention_cases(), output_of,
                    lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0],
                    mistakes, "aiayn.scaled_dot_product_attention")


# ----------------------------------------------------------------- heads (chapter 4)

def check_split_heads(split_heads: Callable) -> Verdict:
    """Check ``split_heads(x, n_heads)``: ``(B, T, d_model) -> (B, n_heads, T, d_k)``.

    Head ``h`` owns the contiguous features ``h * d_k`` to ``(h + 1) * d_k - 1``, as in
    :class:`~aiayn.attention.MultiHeadAttention`, whose own split is the reference
    (``d_k = d_model / n_heads``)."""
    g = torch.Generator().manual_seed(0)
    cases = {
        f"B={b}, T={t}, d_model={d}, n_heads={h}": (torch.randn(b, t, d, generator=g), h)
        for b, t, d, h in ((1, 3, 8, 2), (2, 5, 12, 3), (2, 4, 8, 8), (1, 2, 6, 1))
    }

    def correct(x, h):  # the module's own split, without building a module (no random draws)
        return MultiHeadAttention._split_heads(SimpleNamespace(n_heads=h, d_k=x.shape[-1] // h), x)

    mistakes = [
        (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
         "each head gets a contiguous block of the flattened (T, d_model) array, which mixes "
         "positions, not a block of features: reshape to (B, T, n_heads, d_k) first, then "
         "swap the axes T and n_heads."),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
         "each head gets every n_heads-th feature: head h owns the contiguous features "
         "h*d_k to (h+1)*d_k - 1, so reshape to (B, T, n_heads, d_k), then swap the axes T "
         "and n_heads."),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1),
         "the result is (B, T, n_heads, d_k): swap the axes 1 and 2 to get (B, n_heads, T, d_k)."),
    ]
    return _compare("split_heads", cases, split_heads, correct, mistakes,
                    "MultiHeadAttention's split into heads")


# ----------------------------------------------------------------- positions (chapter 5)

def _encoding(n: int, d: int, *, offset=0, swap=False, halves=False, exponent=None):
    pos = torch.arange(offset, n + offset, dtype=torch.float64)[:, None]  # (n, 1)
    column = torch.arange(d, dtype=torch.float64)  # (d,)
    power = column - column % 2 if exponent is None else exponent(column)
    angles = pos / 10000 ** (power / d)  # (n, d): one angle per entry
    if halves:
        angles = angles[:, 0::2]
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    even = torch.cos if swap else torch.sin
    odd = torch.sin if swap else torch.cos
    table = torch.empty(n, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = even(angles[:, 0::2]), odd(angles[:, 1::2])
    return table


def check_positional_encoding(encoding: Callable) -> Verdict:
    """Check ``encoding(n_positions, d_model)`` against Section 3.5, :func:`~aiayn.positional.sinusoidal_encoding`.

    Row ``pos``, columns ``2i`` and ``2i + 1``: ``sin`` and ``cos`` of ``pos / 10000^(2i/d_model)``,
    positions from 0."""
    cases = {f"n_positions={n}, d_model={d}": (n, d) for n, d in ((1, 2), (4, 6), (50, 16), (9, 64))}
    mistakes = [
        (lambda n, d: _encoding(n, d, swap=True),
         "the sines and cosines are swapped: even columns hold the sine, odd ones the cosine."),
        (lambda n, d: _encoding(n, d, halves=True),
         "all the sines come first, then all the cosines: the paper interleaves them "
         "(column 2i the sine, column 2i+1 the cosine of the same angle)."),
        (lambda n, d: _encoding(n, d, exponent=lambda c: c),
         "column j uses 10000^(j/d_model): the cosine column 2i+1 must share the frequency of "
         "the sine column 2i, 10000^(2i/d_model)."),
        (lambda n, d: _encoding(n, d, exponent=lambda c: (c - c % 2) / 2),
         "the exponent is 2i/d_model, with i the pair's index (2i the sine column's own index); "
         "yours uses i/d_model, so the frequencies fall too slowly."),
        (lambda n, d: _encoding(n, d, exponent=lambda c: 2 * (c - c % 2)),
         "the frequencies fall twice as fast as they should: with i the pair's index, the "
         "exponent is 2i/d_model, and 2i is the sine column's own index."),
        (lambda n, d: _encoding(n, d, offset=1),
         "the first row encodes position 1: positions start at 0 (row 0 is sin 0 = 0, cos 0 = 1)."),
    ]
    return _compare("encoding", cases, encoding,
                    lambda n, d: sinusoidal_encoding(n, d, dtype=torch.float64),
                    mistakes, "aiayn.sinusoidal_encoding")


# ----------------------------------------------------------------- masks (chapter 6)

def check_causal_mask(mask: Callable) -> Verdict:
    """Check ``mask(size)``: the ``(size, size)`` boolean look-ahead mask, True = may attend,
    as :func:`~aiayn.masks.causal_mask` (row ``t``: the positions ``<= t``)."""
    cases = {f"size={n}": (n,) for n in (5, 2, 1)}  # largest first: it tells mistakes apart
    ones = lambda n: torch.ones(n, n, dtype=torch.bool)  # noqa: E731
    mistakes = [
        (lambda n: ones(n).triu(),
         "each position sees itself and the future, not the past: keep the lower triangle "
         "(torch.tril), the transpose of yours."),
        (lambda n: ~ones(n).tril(),
         "True must mean 'may attend': yours marks the blocked positions (invert it)."),
        (lambda n: ones(n).tril(-1),
         "off by one: a position may attend to itself, so the diagonal is True (tril with "
         "diagonal=0)."),
        (lambda n: ones(n).tril(1),
         "off by one: each position sees one step into the future (tril with diagonal=0)."),
        (lambda n: ones(n).tril().float(),
         "the values are right but the dtype is not: the package's masks are boolean "
         "(torch.bool), which masked_fill and ~ expect."),
    ]
    return _compare("mask", cases, mask, lambda n: causal_mask(n), mistakes, "aiayn.causal_mask")


# ----------------------------------------------------------------- schedule (chapter 7)

def check_noam_lr(schedule: Callable) -> Verdict:
    """Check ``schedule(step, d_model, warmup)`` against Eq. 3, :func:`~aiayn.learning.training.noam_lr`:
    ``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, steps counted from 1."""
    points = (1, 2, 50, 399, 400, 401, 4000, 100_000)
    cases = {f"d_model={d}, warmup={w}": (d, w) for d, w in ((512, 4000), (64, 400), (16, 1))}

    def curve(fn):
        return lambda d, w: torch.tensor([float(fn(s, d, w)) for s in points], dtype=torch.float64)

    mistakes = [
        (curve(lambda s, d, w: min(s**-0.5, s * w**-1.5)),
         "the factor d_model^-0.5 is missing."),
        (curve(lambda s, d, w: d**-0.5 * max(s**-0.5, s * w**-1.5)),
         "max where Eq. 3 takes the min: the schedule must rise, then decay."),
        (curve(lambda s, d, w: d**-0.5 * min(s**-0.5, s / w)),
         "the warm-up slope is step * warmup^-1.5, not step / warmup (then the two branches "
         "do not meet at step = warmup)."),
        (curve(lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5)),
         "off by one: Eq. 3 counts steps from 1, and your schedule's step 1 has the value of step 2."),
    ]
    return _compare("schedule", cases, curve(schedule),
                    curve(lambda s, d, w: noam_lr(s, d, w)), mistakes,
                    "aiayn's noam_lr (Eq. 3)", where=lambda index: f"step {points[index[0]]}")
