import datetime

import pytest
import torch

from aiayn.learning.data import (
    DATE_FORMATS,
    CharTokenizer,
    date_batch,
    date_pairs,
    date_split,
    date_tokenizer,
    format_date,
    is_test_date,
)

DAY = datetime.date(2026, 11, 29)


def test_every_form_of_the_example_date():
    forms = [format_date(DAY, i) for i in range(len(DATE_FORMATS))]
    assert forms == list(DATE_FORMATS)  # the documented examples are exactly the outputs
    assert format_date(datetime.date(2001, 3, 2), 3) == "friday, march 2nd 2001"
    assert format_date(datetime.date(2011, 3, 11), 3).endswith("11th 2011")
    with pytest.raises(ValueError, match="form must be an int"):
        format_date(DAY, len(DATE_FORMATS))


def test_forms_are_unambiguous():
    # Over a whole leap year, no written string maps to two different dates.
    seen = {}
    for n in range(366):
        day = datetime.date(2024, 1, 1) + datetime.timedelta(n)
        for form in range(len(DATE_FORMATS)):
            text = format_date(day, form)
            assert seen.setdefault(text, day) == day


def test_split_is_disjoint_large_enough_and_fixed():
    test, train = date_split("test"), date_split("train")
    assert len(test) >= 1000
    assert not set(test) & set(train)
    assert all(is_test_date(d) for d in test)
    assert len(test) + len(train) == (datetime.date(2049, 12, 31) - datetime.date(1950, 1, 1)).days + 1
    with pytest.raises(ValueError, match="split must be"):
        date_split("valid")


def test_pairs_are_reproducible_correct_and_never_leak():
    a, b = date_pairs(500, seed=3), date_pairs(500, seed=3)
    assert a == b and a != date_pairs(500, seed=4)
    test_iso = {d.isoformat() for d in date_split("test")}
    assert not {iso for _, iso in a} & test_iso
    assert {iso for _, iso in date_pairs(200, "test")} <= test_iso
    for text, iso in a:
        assert text in {format_date(datetime.date.fromisoformat(iso), f) for f in range(7)}
    with pytest.raises(ValueError, match="n must be a positive int"):
        date_pairs(0)


def test_tokenizer_round_trip_and_errors():
    tok = date_tokenizer()
    for text, iso in date_pairs(100):
        assert tok.decode(tok.encode(text)) == text
        ids = tok.encode(iso, bos=True)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and len(ids) == len(iso) + 2
    assert tok.decode([tok.bos_id, *tok.encode("12"), tok.pad_id, *tok.encode("3")]) == "12"
    with pytest.raises(ValueError, match="character '@' at position 2"):
        tok.encode("12@3")
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(12)
    with pytest.raises(ValueError, match="must not repeat"):
        CharTokenizer("aa")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([len(tok)])


def test_batch_shapes_and_padding():
    tok = date_tokenizer()
    pairs = [("2026.11.29", "2026-11-29"), ("sunday, november 29th 2026", "2026-11-29")]
    src, tgt = date_batch(pairs, tok)
    assert src.shape == (2, 27) and tgt.shape == (2, 12)
    assert src.dtype == torch.long
    assert (src[0, 11:] == tok.pad_id).all() and src[0, 10] == tok.eos_id
    assert tok.decode(tgt[1, 1:]) == "2026-11-29"
