"""Batches by token count, bucketed by length; shards of a distributed run."""

from __future__ import annotations

import numpy as np
import pytest

from aiayn.train.batching import BatchStream, EncodedPairs, token_batches


def _lengths(n=500, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 60, n)
    return src, np.clip(src + rng.integers(-5, 6, n), 2, None)


def test_every_pair_once_and_no_batch_over_budget():
    src, tgt = _lengths()
    batches = token_batches(src, tgt, max_tokens=400, seed=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))
    for b in batches:
        assert len(b) * src[b].max() <= 400 and len(b) * tgt[b].max() <= 400
    # Bucketed by length: little padding (a random order would pad about half).
    padded = sum(len(b) * src[b].max() for b in batches)
    assert src.sum() / padded > 0.85
    # Greedy packing: most batches are nearly full.
    assert np.mean([len(b) * max(src[b].max(), tgt[b].max()) for b in batches]) > 0.8 * 400


def test_order_is_seeded():
    src, tgt = _lengths()
    a = token_batches(src, tgt, 400, seed=1)
    b = token_batches(src, tgt, 400, seed=1)
    c = token_batches(src, tgt, 400, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) != len(c) or not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_a_sentence_longer_than_max_tokens_is_refused():
    with pytest.raises(ValueError, match=r"max_tokens \(10\) is smaller than the longest sentence \(12"):
        token_batches([5, 12], [4, 4], max_tokens=10)


def _pairs(n=60):
    rng = np.random.default_rng(0)
    src = [list(range(1, int(k) + 1)) for k in rng.integers(2, 20, n)]
    return EncodedPairs(src, [[1, *s[::-1], 2] for s in src])


def test_encoded_pairs_pad_and_keep_ids():
    pairs = _pairs()
    assert pairs[3][1] == [1, *pairs[3][0][::-1], 2]
    src, tgt = pairs.tensors([0, 3])
    assert src.shape == (2, max(len(pairs[0][0]), len(pairs[3][0])))
    assert src[1, : len(pairs[3][0])].tolist() == pairs[3][0]
    assert (src[1, len(pairs[3][0]):] == 0).all()


def test_ranks_read_disjoint_shards_that_cover_the_single_process_stream():
    stream = BatchStream(_pairs(), max_tokens=60, seed=0)
    world, accum, steps = 2, 2, 7  # more steps than one epoch holds
    assert steps * world * accum > stream.batches_per_epoch
    seen = {r: [] for r in range(world)}
    consumed = 0
    for _ in range(steps):
        for r in range(world):
            seen[r] += [stream.index(consumed, m, r, world) for m in range(accum)]
        consumed += world * accum
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(steps * world * accum))
    # A later epoch has a different order but the same pairs.
    n = stream.batches_per_epoch
    first = np.concatenate([stream.indices(g) for g in range(n)])
    second = np.concatenate([stream.indices(g) for g in range(n, 2 * n)])
    assert sorted(first) == sorted(second) == list(range(60))
    assert not np.array_equal(first, second)


def test_concatenated_chunks_equal_one_store():
    whole = _pairs(60)
    parts = [EncodedPairs(*map(list, zip(*[whole[i] for i in range(a, b)], strict=True)))
             for a, b in ((0, 25), (25, 26), (26, 60))]
    joined = EncodedPairs.concatenate(parts)
    assert len(joined) == len(whole) == 60
    assert all(joined[i] == whole[i] for i in range(60))
    assert np.array_equal(joined.tgt_lengths, whole.tgt_lengths)
    with pytest.raises(ValueError, match="at least one"):
        EncodedPairs.concatenate([])


def test_fingerprint_tells_apart_pairs_that_differ_in_one_id_or_one_boundary():
    whole = _pairs(60)
    parts = [EncodedPairs(*map(list, zip(*[whole[i] for i in range(a, b)], strict=True)))
             for a, b in ((0, 30), (30, 60))]
    assert EncodedPairs.concatenate(parts).fingerprint() == whole.fingerprint()  # same pairs
    assert len(whole.fingerprint()) == 64  # SHA-256, hex
    rows = [whole[i] for i in range(60)]
    one_id = [(s, t) for s, t in rows]
    one_id[7] = (one_id[7][0], [*one_id[7][1][:-1], 3])  # one target id changed
    moved = [([*rows[0][0], rows[1][0][0]], rows[0][1]), (rows[1][0][1:], rows[1][1]), *rows[2:]]
    for other in (one_id, moved):  # moved: the same ids, one sentence boundary shifted
        pairs = EncodedPairs([s for s, _ in other], [t for _, t in other])
        assert len(pairs) == 60 and pairs.fingerprint() != whole.fingerprint()
