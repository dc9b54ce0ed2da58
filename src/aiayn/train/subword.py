"""Real parallel text: reading aligned files, and a shared subword vocabulary.

The paper encodes WMT14 English-German with byte-pair encoding, "a shared
source-target vocabulary of about 37000 tokens" (Section 5.1). Here the vocabulary
is learned by Hugging Face ``tokenizers`` (byte-level BPE, so every string
round-trips exactly and no token is ever unknown) on the user's two training files,
and saved as one JSON file beside the checkpoints. Under ``torchrun`` only rank 0
learns it; the others wait for the file (:func:`shared_vocabulary`).

``tokenizers`` is an optional dependency (``pip install aiayn[scale]``); it is
imported only when a vocabulary is trained or loaded.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

__all__ = ["read_parallel", "SubwordTokenizer", "train_subword_tokenizer", "shared_vocabulary"]

#: Special tokens, in id order; the ids agree with :class:`aiayn.learning.data.CharTokenizer`.
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "training on your own text needs Hugging Face 'tokenizers': "
            "pip install 'aiayn[scale]' (or pip install tokenizers)"
        ) from error
    return tokenizers


def _read_lines(path: Path, argument: str) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{argument}: no such file: {path}")
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, names: tuple[str, str] = ("source", "target")
) -> list[tuple[str, str]]:
    """Read two aligned plain-text files (UTF-8, one sentence per line) into pairs.

    Line ``i`` of ``src_path`` translates line ``i`` of ``tgt_path``. Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` when the files have
    different line counts (both counts are named), are empty, or hold an empty line
    (file and 1-based line number are named). ``names`` are the argument names used
    in those messages, e.g. ``("--train-src", "--train-tgt")``."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_lines = _read_lines(src_path, names[0])
    tgt_lines = _read_lines(tgt_path, names[1])
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"{names[0]} and {names[1]} are not aligned: {src_path} has {len(src_lines)} "
            f"lines but {tgt_path} has {len(tgt_lines)}"
        )
    if not src_lines:
        raise ValueError(f"{names[0]} ({src_path}) and {names[1]} ({tgt_path}) are empty")
    for name, path, lines in ((names[0], src_path, src_lines), (names[1], tgt_path, tgt_lines)):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise ValueError(
                    f"{name}: line {number} of {path} is empty (every line must hold a "
                    "sentence; remove the pair from both files)"
                )
    return list(zip(src_lines, tgt_lines, strict=True))


class SubwordTokenizer:
    """A shared byte-level BPE vocabulary; ids 0-3 are ``<pad> <bos> <eos> <unk>``.

    Same interface as :class:`aiayn.learning.data.CharTokenizer`: ``encode``, ``decode``,
    ``len()``, ``pad_id``, ``bos_id``, ``eos_id``. Build one with
    :func:`train_subword_tokenizer` or :meth:`load`."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3
    specials = SPECIALS

    def __init__(self, tokenizer):
        for i, token in enumerate(SPECIALS):
            if tokenizer.token_to_id(token) != i:
                raise ValueError(f"the vocabulary must give {token} the id {i}")
        self._tokenizer = tokenizer

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size()

    def __repr__(self) -> str:
        return f"SubwordTokenizer({len(self)} ids: byte-level BPE, 4 specials)"

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> list[int]:
        """Subword ids of ``text``, optionally between ``<bos>`` and ``<eos>``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def encode_batch(self, texts: list[str], bos: bool = False, eos: bool = True) -> list[list[int]]:
        """:meth:`encode` of many texts at once (in parallel threads)."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [[self.bos_id] * bos + e.ids + [self.eos_id] * eos for e in encodings]

    def decode(self, ids) -> str:
        """The text of ``ids`` (a list or 1-D tensor): stops at ``<eos>``, skips specials."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        kept = []
        for i in ids:
            if i == self.eos_id:
                break
            if not 0 <= i < len(self):
                raise ValueError(f"id {i} is outside the vocabulary of {len(self)} ids")
            if i >= len(SPECIALS):
                kept.append(i)
        return self._tokenizer.decode(kept, skip_special_tokens=True)

    def save(self, path: str | Path) -> None:
        """Write the vocabulary and merges to one JSON file, atomically: a temporary file
        in the same folder renamed over ``path``, so a reader never sees half of it."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            self._tokenizer.save(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def load(cls, path: str | Path) -> SubwordTokenizer:
        """Read a vocabulary written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no subword vocabulary at {path}")
        tokenizers = _import_tokenizers()
        return cls(tokenizers.Tokenizer.from_file(str(path)))


def _check_inputs(files: list[str | Path], vocab_size: int) -> None:
    if not isinstance(vocab_size, int) or vocab_size < len(SPECIALS) + 256:
        raise ValueError(
            f"vocab_size must be an int of at least {len(SPECIALS) + 256} (the specials and "
            f"the 256 bytes), got {vocab_size!r}"
        )
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        raise FileNotFoundError(f"no such file(s) to learn the vocabulary from: {missing}")


def train_subword_tokenizer(
    files: list[str | Path], vocab_size: int = 37_000, min_frequency: int = 2
) -> SubwordTokenizer:
    """Learn one byte-level BPE vocabulary of at most ``vocab_size`` ids from ``files``
    (the source and target training files together: a *shared* vocabulary, Section 5.1).

    The result is deterministic for the same files and arguments."""
    _check_inputs(files, vocab_size)
    tokenizers = _import_tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(f) for f in files], trainer)
    return SubwordTokenizer(tokenizer)


def shared_vocabulary(
    path: str | Path, files: list[str | Path], vocab_size: int, rank: int,
    timeout: float = 7200.0,
) -> SubwordTokenizer:
    """The vocabulary at ``path``, learned from ``files`` by rank 0 if it is not there yet.

    Call it on every rank *before* the process group is created: rank 0 learns and saves
    the vocabulary (atomically), every other rank waits up to ``timeout`` seconds for the
    file to appear (:func:`aiayn.train.distributed.wait_for_file`) and then loads it. On
    WMT-sized data learning takes minutes, longer than a collective call may wait (NCCL's
    default process-group timeout is 10 minutes); polling a file has no such limit. Every
    rank checks the arguments first, so that bad ones fail everywhere at once."""
    from .distributed import wait_for_file

    path = Path(path)
    if not path.is_file():
        _check_inputs(files, vocab_size)
    if rank == 0 and not path.is_file():
        train_subword_tokenizer(list(files), vocab_size).save(path)
    wait_for_file(path, timeout, "the BPE vocabulary", "--vocab-timeout SECONDS")
    return SubwordTokenizer.load(path)
