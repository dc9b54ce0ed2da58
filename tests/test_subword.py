"""Shared BPE vocabulary on generated parallel text; reading aligned files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiayn.learning.data import date_pairs
from aiayn.train.subword import SubwordTokenizer, read_parallel, train_subword_tokenizer

pytest.importorskip("tokenizers")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path):
    """A small generated 'translation' corpus: written dates -> a German-ish rendering."""
    pairs = date_pairs(400, seed=3)
    src = [f"{s}, said Zoë  (twice)" for s, _ in pairs]
    tgt = [f"Datum: {t} – sagte Zoë" for _, t in pairs]
    return _write(tmp_path / "train.en", src), _write(tmp_path / "train.de", tgt)


def test_round_trip_of_every_line(corpus, tmp_path):
    tokenizer = train_subword_tokenizer(list(corpus), vocab_size=500)
    assert 260 < len(tokenizer) <= 500
    pairs = read_parallel(*corpus)
    for src, tgt in pairs:
        for text in (src, tgt):
            ids = tokenizer.encode(text, bos=True)
            assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
            assert tokenizer.decode(ids) == text
    # Subwords, not characters: BPE merged the frequent strings.
    assert len(tokenizer.encode(pairs[0][1])) < len(pairs[0][1]) / 2
    # Byte-level: text never seen in training still round-trips, nothing is <unk>.
    unseen = "Übermorgen, 東京 😀 \t tabs"
    assert tokenizer.decode(tokenizer.encode(unseen)) == unseen
    assert tokenizer.unk_id not in tokenizer.encode(unseen)
    # Saved beside a checkpoint and loaded back: the same ids.
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = SubwordTokenizer.load(tmp_path / "tokenizer.json")
    assert loaded.encode_batch([s for s, _ in pairs[:20]]) == [tokenizer.encode(s) for s, _ in pairs[:20]]


def test_save_is_atomic_and_shared_vocabulary_learns_once(corpus, tmp_path, monkeypatch):
    import os

    from aiayn.train.subword import shared_vocabulary

    path = tmp_path / "tokenizer.json"
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append((a, b)) or real_replace(a, b))
    first = shared_vocabulary(path, list(corpus), 400, rank=0)
    (tmp, dst), = replaced  # written beside the target, then renamed over it
    assert Path(tmp).parent == tmp_path and Path(dst) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "train.de", "train.en"]
    # Present already: rank 0 loads it rather than learning again, rank 1 does not wait.
    again = shared_vocabulary(path, list(corpus), 300, rank=0)
    other = shared_vocabulary(path, list(corpus), 300, rank=1, timeout=0.0)
    assert len(replaced) == 1 and len(first) == len(again) == len(other) > 300


def test_training_is_deterministic(corpus):
    a = train_subword_tokenizer(list(corpus), vocab_size=400)
    b = train_subword_tokenizer(list(corpus), vocab_size=400)
    text = read_parallel(*corpus)[7][0]
    assert a.encode(text) == b.encode(text)


def test_misaligned_files_are_refused(tmp_path):
    src = _write(tmp_path / "a.en", ["one", "two", "three"])
    tgt = _write(tmp_path / "a.de", ["eins", "zwei"])
    with pytest.raises(ValueError, match=r"not aligned: .*a\.en has 3 lines but .*a\.de has 2"):
        read_parallel(src, tgt)


def test_empty_line_is_refused_with_file_and_line(tmp_path):
    src = _write(tmp_path / "b.en", ["one", "two", "three"])
    tgt = _write(tmp_path / "b.de", ["eins", "  ", "drei"])
    with pytest.raises(ValueError, match=r"--train-tgt: line 2 of .*b\.de is empty"):
        read_parallel(src, tgt, ("--train-src", "--train-tgt"))


def test_missing_file_is_named(tmp_path):
    src = _write(tmp_path / "c.en", ["one"])
    with pytest.raises(FileNotFoundError, match=r"--valid-tgt: no such file: .*nothing\.de"):
        read_parallel(src, tmp_path / "nothing.de", ("--valid-src", "--valid-tgt"))
    with pytest.raises(FileNotFoundError, match="nothing.de"):
        train_subword_tokenizer([src, tmp_path / "nothing.de"], vocab_size=300)


def test_small_vocab_is_refused(corpus):
    with pytest.raises(ValueError, match="vocab_size must be an int of at least 260"):
        train_subword_tokenizer(list(corpus), vocab_size=100)


@pytest.fixture
def one_thread():
    """One torch thread, as the subprocess runs: several threads per process on a busy
    2-core machine wait for each other far longer than they compute."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def test_text_training_end_to_end(corpus, tmp_path, one_thread):
    """The command on user text: the vocabulary lands beside the checkpoints, BLEU is reported."""
    from aiayn.train.cli import main

    out = tmp_path / "run"
    summary = main([
        "--train-src", str(corpus[0]), "--train-tgt", str(corpus[1]),
        "--valid-src", str(corpus[0]), "--valid-tgt", str(corpus[1]), "--eval-limit", "4",
        "--vocab-size", "400", "--max-tokens", "800", "--steps", "2", "--warmup", "10",
        "--out-dir", str(out), "--no-progress", "--d-model", "32", "--d-ff", "64",
        "--max-len", "14",
    ])
    assert (out / "tokenizer.json").is_file() and (out / "checkpoint_00000002.pt").is_file()
    assert summary["step"] == 2 and 0.0 <= summary["eval"]["bleu"] <= 100.0
    tokenizer = SubwordTokenizer.load(out / "tokenizer.json")
    from aiayn.learning.training import load_checkpoint

    model, _ = load_checkpoint(out / "checkpoint_00000002.pt")
    assert model.config.src_vocab == len(tokenizer)
    # Pairs longer than --max-len tokens were left out of training, and the log says so.
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    dropped = next(r for r in log if r["event"] == "dropped_long_pairs")
    start = next(r for r in log if r["event"] == "start")
    assert dropped["count"] > 0 and start["pairs"] == 400 - dropped["count"]
