"""The ``check_*`` functions of ``aiayn.exercises.checks``: a correct attempt passes, and each planted
mistake, written the way a reader would write it, gets its own message."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.exercises.checks import (
    Verdict,
    check_attention,
    check_causal_mask,
    check_noam_lr,
    check_positional_encoding,
    check_split_heads,
)


def _attention(scale="sqrt", dim=-1, fill=float("-inf"), invert=False, use_mask=True,
               zeros_for_empty=True, return_weights=False, open_empty=False):
    """A reader's attention, with one switch per mistake."""
    def attention(q, k, v, mask=None):
        d_k = q.shape[-1]
        if open_empty and mask is not None:  # no NaN: a row with no key sees them all
            mask = mask | ~mask.any(-1, keepdim=True)
            zeros = False
        else:
            zeros = zeros_for_empty
        divisor = {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": d_k}[scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if mask is not None and use_mask:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        weights = torch.softmax(scores, dim=dim)
        if mask is not None and zeros:
            weights = torch.where(mask.any(-1, keepdim=True), weights, 0.0)
        out = weights @ v
        return (out, weights) if return_weights else out
    return attention


ATTENTION_MISTAKES = {
    "no scale": (_attention(scale="none"), "without the scale"),
    "divided by d_k": (_attention(scale="d_k"), "divides the scores by d_k"),
    "softmax over queries": (_attention(dim=-2), "softmax over the last"),
    "mask ignored": (_attention(use_mask=False, zeros_for_empty=False), "masked keys get weight"),
    "mask inverted": (_attention(invert=True), "True in the mask means"),
    "NaN rows": (_attention(zeros_for_empty=False), "gets NaN"),
    "-1e9 fill": (_attention(fill=-1e9, zeros_for_empty=False), "uniform weights"),
    "empty rows opened": (_attention(open_empty=True), "attends to every key"),
}


@pytest.mark.parametrize("return_weights", [False, True])
def test_a_correct_attention_passes(return_weights):
    verdict = check_attention(_attention(return_weights=return_weights))
    assert isinstance(verdict, Verdict) and verdict.ok, verdict.message
    assert verdict.message.startswith("Correct")


@pytest.mark.parametrize("name", ATTENTION_MISTAKES)
def test_each_attention_mistake_is_named(name):
    attempt, expected = ATTENTION_MISTAKES[name]
    verdict = check_attention(attempt)
    assert not verdict and expected in verdict.message, verdict.message


def test_the_messages_are_all_different():
    messages = {check_attention(a).message.split(": ", 1)[1] for a, _ in ATTENTION_MISTAKES.values()}
    assert len(messages) == len(ATTENTION_MISTAKES)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_an_unknown_error_and_a_crash_are_reported():
    wrong_values = check_attention(lambda q, k, v, mask=None: _attention()(q, k, v, mask) * 1.1)
    assert not wrong_values and "differs from aiayn.scaled_dot_product_attention: at index" \
        in str(wrong_values) and "yours gives" in str(wrong_values)
    crash = check_attention(lambda q, k, v, mask=None: q @ k)  # k not transposed
    assert not crash and "raised RuntimeError" in crash.message
    two_d_only = check_attention(lambda q, k, v, mask=None: torch.softmax(
        q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v)  # works for (T, d_k) only
    assert not two_d_only and "k.transpose(-2, -1), not k.T" in two_d_only.message
    transposed = check_attention(lambda q, k, v, mask=None: (_attention()(q, k, v, mask)).transpose(-2, -1))
    assert not transposed and "has shape" in transposed.message


def test_an_attempt_that_changes_its_inputs_is_judged_on_what_it_returns():
    def in_place(q, k, v, mask=None):
        q /= math.sqrt(q.shape[-1])  # changes the caller's tensor: allowed, if the result is right
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = torch.where(mask.any(-1, keepdim=True), weights, 0.0)
        return [weights @ v, weights]  # a list works as well as a tuple
    assert check_attention(in_place).ok, check_attention(in_place).message


def test_a_correct_float32_attempt_passes_and_lists_are_refused():
    def encoding32(n_positions, d_model):  # PyTorch's default dtype
        pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
        angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        table = torch.zeros(n_positions, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return table
    assert check_positional_encoding(encoding32).ok, check_positional_encoding(encoding32).message
    # Right values in a list: the package's functions would refuse it, so the check does too.
    as_lists = check_causal_mask(lambda n: [[j <= i for j in range(n)] for i in range(n)])
    assert not as_lists and "not a torch.Tensor" in as_lists.message


def test_a_near_miss_names_an_entry_outside_the_tolerance():
    in_float16 = check_attention(lambda q, k, v, mask=None: _attention()(
        q.float(), k.float(), v.float(), mask).half().double())  # float16's precision, as float64
    assert not in_float16 and "yours gives" in in_float16.message and "%" not in in_float16.message


def test_a_wrong_schedule_names_the_step_and_the_relative_gap():
    from aiayn.learning.training import noam_lr

    verdict = check_noam_lr(lambda s, d, w: 1.1 * noam_lr(s, d, w))
    assert not verdict and "at step " in verdict.message and "yours gives" in verdict.message


def test_an_assert_on_a_verdict_can_carry_its_sentence():
    verdict = check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).triu())
    with pytest.raises(AssertionError, match="the transpose of yours"):
        assert verdict, verdict


def test_half_precision_is_refused_and_wrong_masks_are_shown():
    half = check_positional_encoding(lambda n, d: torch.zeros(n, d, dtype=torch.bfloat16))
    assert not half and "round-off would hide real mistakes" in half.message
    all_true = check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool))
    assert not all_true and "the entries differ from aiayn.causal_mask" in all_true.message


def test_the_split_check_draws_no_random_numbers():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    check_split_heads(_split("right"))  # its inputs come from its own generator
    assert torch.equal(torch.rand(1), expected)


def test_unstacked_pieces_are_named():
    verdict = check_split_heads(lambda x, h: x.chunk(h, dim=-1))
    assert not verdict and "not one tensor: stack them" in verdict.message


def _split(kind):
    def split_heads(x, n_heads):
        b, t, d = x.shape
        d_k = d // n_heads
        if kind == "right":
            return x.view(b, t, n_heads, d_k).transpose(1, 2)
        if kind == "no transpose first":
            return x.view(b, n_heads, t, d_k)
        if kind == "strided":
            return x.view(b, t, d_k, n_heads).permute(0, 3, 1, 2)
        return x.view(b, t, n_heads, d_k)  # forgot the transpose
    return split_heads


@pytest.mark.parametrize("kind, expected", [
    ("no transpose first", "which mixes positions"), ("strided", "every n_heads-th feature"),
    ("forgot", "swap the axes 1 and 2")])
def test_split_heads_mistakes(kind, expected):
    """(also: pieces that are not stacked get their own message)"""
    assert check_split_heads(_split("right")).ok
    verdict = check_split_heads(_split(kind))
    assert not verdict and expected in verdict.message, verdict.message


def _encoding(kind):
    def encoding(n_positions, d_model):
        pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
        start = 1 if kind == "from 1" else 0
        for pos in range(n_positions):
            for i in range(d_model // 2):
                two_i = {"i": i, "4i": 4 * i, "pair index": i}.get(kind, 2 * i)
                angle = (pos + start) / 10000 ** (two_i / d_model)
                sin, cos = math.sin(angle), math.cos(angle)
                if kind == "swapped":
                    sin, cos = cos, sin
                if kind == "halves":
                    pe[pos, i], pe[pos, d_model // 2 + i] = sin, cos
                elif kind == "column index":
                    pe[pos, 2 * i] = sin
                    pe[pos, 2 * i + 1] = math.cos((pos + start) / 10000 ** ((2 * i + 1) / d_model))
                else:
                    pe[pos, 2 * i], pe[pos, 2 * i + 1] = sin, cos
        return pe
    return encoding


@pytest.mark.parametrize("kind, expected", [
    ("swapped", "swapped"), ("halves", "all the sines come first"),
    ("column index", "must share the frequency"), ("4i", "twice as fast"),
    ("pair index", "fall too slowly"),
    ("from 1", "positions start at 0")])
def test_positional_encoding_mistakes(kind, expected):
    assert check_positional_encoding(_encoding("right")).ok
    verdict = check_positional_encoding(_encoding(kind))
    assert not verdict and expected in verdict.message, verdict.message


def _judged(verdict: Verdict, expected: str | None) -> None:
    """A correct attempt (``expected`` None) passes; a wrong one fails with ``expected`` in its message."""
    if expected is None:
        assert verdict.ok, verdict.message
    else:
        assert not verdict and expected in verdict.message, verdict.message


@pytest.mark.parametrize("attempt, expected", [
    (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), "the transpose of yours"),
    (lambda n: torch.ones(n, n).triu(1) == 1, "marks the blocked positions"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "diagonal is True"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(1), "one step into the future"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril().numpy(), "a NumPy array, not a torch.Tensor"),
    (lambda n: [[j <= i for j in range(n)] for i in range(n)], "a list, not a torch.Tensor"),
    (lambda n: torch.ones(n, n).tril(), "the dtype is not"),
    (lambda n: torch.tensor([[i >= j for j in range(n)] for i in range(n)]), None),
])
def test_causal_mask_mistakes(attempt, expected):
    _judged(check_causal_mask(attempt), expected)


@pytest.mark.parametrize("attempt, expected", [
    (lambda s, d, w: d**-0.5 * min(s**-0.5, s * w**-1.5), None),
    (lambda s, d, w: min(s**-0.5, s * w**-1.5), "d_model^-0.5 is missing"),
    (lambda s, d, w: d**-0.5 * max(s**-0.5, s * w**-1.5), "max where"),
    (lambda s, d, w: d**-0.5 * min(s**-0.5, s / w), "warmup^-1.5"),
    (lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5), "off by one"),
])
def test_noam_lr_mistakes(attempt, expected):
    _judged(check_noam_lr(attempt), expected)
