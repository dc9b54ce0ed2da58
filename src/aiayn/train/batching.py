"""The paper's batching: sentence pairs grouped by length, batches sized by tokens.

"Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens
and 25000 target tokens" (Section 5.1). :func:`token_batches` sorts the pairs by
length and packs them so that neither side's *padded* batch, ``rows * longest``,
exceeds ``max_tokens``. :class:`BatchStream` then serves batch number ``g`` of an
endless, seeded sequence of epochs, so that every rank of a distributed run can read
its own share, and a resumed run can read exactly what it would have read, from
nothing but a counter of the batches already consumed.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

__all__ = ["EncodedPairs", "encode_pairs", "token_batches", "BatchStream"]


def _flatten(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    flat = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


class EncodedPairs:
    """Token ids of many sentence pairs, stored flat (two int32 arrays and offsets),
    so that millions of pairs fit in memory.

    ``pairs[i]`` is ``(src_ids, tgt_ids)`` as lists; ``src_lengths``/``tgt_lengths``
    are NumPy arrays of the lengths (with the special tokens)."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]):
        if len(src) != len(tgt):
            raise ValueError(f"src and tgt must hold as many sequences, got {len(src)} and {len(tgt)}")
        if not src:
            raise ValueError("there must be at least one sentence pair")
        self._set(*_flatten(src), *_flatten(tgt))

    def _set(self, src, src_lengths, tgt, tgt_lengths) -> None:
        self._src, self.src_lengths = src, src_lengths
        self._tgt, self.tgt_lengths = tgt, tgt_lengths
        self._src_start = np.concatenate([[0], np.cumsum(self.src_lengths)])
        self._tgt_start = np.concatenate([[0], np.cumsum(self.tgt_lengths)])

    @classmethod
    def concatenate(cls, parts: list[EncodedPairs]) -> EncodedPairs:
        """One store of the pairs of ``parts``, in order (build a large corpus chunk by chunk)."""
        if not parts:
            raise ValueError("parts must hold at least one EncodedPairs")
        joined = cls.__new__(cls)
        joined._set(
            np.concatenate([p._src for p in parts]), np.concatenate([p.src_lengths for p in parts]),
            np.concatenate([p._tgt for p in parts]), np.concatenate([p.tgt_lengths for p in parts]),
        )
        return joined

    def __len__(self) -> int:
        return len(self.src_lengths)

    def fingerprint(self) -> str:
        """SHA-256 (hex) of every token id and length, source side then target side: equal
        for the same pairs encoded the same way, different if one id or sentence differs.
        A checkpoint stores it so that ``--resume`` can refuse other data."""
        digest = hashlib.sha256()
        for array in (self.src_lengths, self._src, self.tgt_lengths, self._tgt):
            digest.update(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).data)
        return digest.hexdigest()

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        s0, s1 = self._src_start[i], self._src_start[i + 1]
        t0, t1 = self._tgt_start[i], self._tgt_start[i + 1]
        return self._src[s0:s1].tolist(), self._tgt[t0:t1].tolist()

    def tensors(self, indices, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, tgt)`` right-padded ``(B, S)`` and ``(B, T)`` int64 tensors of ``indices``."""
        from ..learning.data import pad_batch

        rows = [self[int(i)] for i in indices]
        return pad_batch([s for s, _ in rows], pad_id), pad_batch([t for _, t in rows], pad_id)


def encode_pairs(
    tokenizer, pairs: list[tuple[str, str]], max_len: int, chunk: int = 100_000
) -> tuple[EncodedPairs, int]:
    """Encode text pairs (source + ``<eos>``; ``<bos>`` + target + ``<eos>``) with
    ``tokenizer.encode_batch``, keep those whose both sides have at most ``max_len`` ids,
    and return ``(EncodedPairs, number of pairs dropped)``.

    Works ``chunk`` pairs at a time, each stored as int32 arrays at once: Python lists of
    the ids of millions of sentences would take several GB. Raises ``ValueError`` when no
    pair is short enough."""
    parts, dropped = [], 0
    for start in range(0, len(pairs), chunk):
        block = pairs[start : start + chunk]
        src = tokenizer.encode_batch([s for s, _ in block])
        tgt = tokenizer.encode_batch([t for _, t in block], bos=True)
        kept = [i for i in range(len(src)) if len(src[i]) <= max_len and len(tgt[i]) <= max_len]
        dropped += len(src) - len(kept)
        if kept:
            parts.append(EncodedPairs([src[i] for i in kept], [tgt[i] for i in kept]))
    if not parts:
        raise ValueError(f"--max-len {max_len}: every training pair is longer than that")
    return EncodedPairs.concatenate(parts), dropped


def token_batches(
    src_lengths, tgt_lengths, max_tokens: int = 25_000, seed: int = 0
) -> list[np.ndarray]:
    """Group pairs of similar length into batches of at most ``max_tokens`` padded tokens
    per side; return the batches (arrays of pair indices) in a seeded random order.

    Pairs are sorted by their longer side (ties in a random order drawn from ``seed``)
    and packed greedily: a batch is closed when one more pair would make
    ``rows * longest`` exceed ``max_tokens`` on the source or the target side. Raises
    ``ValueError`` when a single pair is longer than ``max_tokens``."""
    src_lengths = np.asarray(src_lengths, dtype=np.int64)
    tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
    if src_lengths.shape != tgt_lengths.shape or src_lengths.ndim != 1 or not len(src_lengths):
        raise ValueError("src_lengths and tgt_lengths must be non-empty 1-D sequences of one length")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    longest = int(max(src_lengths.max(), tgt_lengths.max()))
    if longest > max_tokens:
        raise ValueError(
            f"max_tokens ({max_tokens}) is smaller than the longest sentence ({longest} tokens "
            "with <bos>/<eos>): raise --max-tokens or drop long pairs with --max-len"
        )
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(src_lengths))
    key = np.maximum(src_lengths, tgt_lengths)[shuffled]
    order = shuffled[np.argsort(key, kind="stable")]  # by length; ties in random order
    batches, start, rows, max_s, max_t = [], 0, 0, 0, 0
    for pos, i in enumerate(order):
        s, t = max(max_s, int(src_lengths[i])), max(max_t, int(tgt_lengths[i]))
        if rows and ((rows + 1) * s > max_tokens or (rows + 1) * t > max_tokens):
            batches.append(order[start:pos])
            start, rows, s, t = pos, 0, int(src_lengths[i]), int(tgt_lengths[i])
        rows, max_s, max_t = rows + 1, s, t
    batches.append(order[start:])
    return [batches[j] for j in rng.permutation(len(batches))]


class BatchStream:
    """Batch ``g`` (0, 1, 2, ...) of an endless sequence of epochs of :func:`token_batches`.

    Epoch ``e`` uses the order drawn from ``seed + e``. In a run with ``world_size``
    ranks and ``accum_steps`` micro-batches per optimizer step, the micro-batch ``m`` of
    rank ``r`` after ``consumed`` batches is :meth:`index` ``= consumed + m * world_size + r``:
    each rank reads its own shard, and the counter ``consumed`` is the whole data
    position that a checkpoint needs to store."""

    def __init__(self, pairs: EncodedPairs, max_tokens: int = 25_000, seed: int = 0, pad_id: int = 0):
        self.pairs, self.max_tokens, self.seed, self.pad_id = pairs, max_tokens, seed, pad_id
        self._epoch, self._batches = -1, []
        self.batches_per_epoch = len(self._epoch_batches(0))

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        if epoch != self._epoch:
            self._batches = token_batches(
                self.pairs.src_lengths, self.pairs.tgt_lengths, self.max_tokens, self.seed + epoch
            )
            self._epoch = epoch
        return self._batches

    @staticmethod
    def index(consumed: int, micro_step: int, rank: int, world_size: int) -> int:
        """The global batch number that rank ``rank`` reads in micro-step ``micro_step``."""
        return consumed + micro_step * world_size + rank

    def indices(self, g: int) -> np.ndarray:
        """The pair indices of global batch ``g``."""
        epoch, i = divmod(g, self.batches_per_epoch)
        return self._epoch_batches(epoch)[i]

    def batch(self, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, tgt)`` tensors of global batch ``g`` (on the CPU)."""
        return self.pairs.tensors(self.indices(g), self.pad_id)
