"""causal_mask, padding_mask and check_mask: values, shapes and errors."""

from __future__ import annotations

import pytest
import torch

from aiayn import causal_mask, padding_mask
from aiayn.masks import check_mask


@pytest.mark.parametrize("size", [1, 2, 5])
def test_causal_mask_is_lower_triangular(size):
    mask = causal_mask(size)
    assert mask.dtype == torch.bool and mask.shape == (size, size)
    for t in range(size):
        for s in range(size):
            assert bool(mask[t, s]) == (s <= t)  # True = may attend: the past and itself


def test_causal_mask_known_value_and_device():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)
    assert causal_mask(3, device="cpu").device.type == "cpu"
    assert causal_mask(3, device=torch.device("meta")).device.type == "meta"


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_causal_mask_bad_size(bad):
    with pytest.raises(ValueError, match=r"size must be a positive int, got"):
        causal_mask(bad)


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[5, 6, 7, 0, 0], [3, 0, 4, 0, 9]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 5)
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 0, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0, 0, :], expected)
    # Another pad id: only that id is masked.
    assert torch.equal(padding_mask(tokens, pad_id=5)[:, 0, 0], tokens != 5)
    # Broadcasts over heads and queries of (B, H, T, S), and combines with a causal mask.
    combined = causal_mask(5) & mask
    assert combined.shape == (2, 1, 5, 5)
    assert torch.equal(combined[1, 0, 4], torch.tensor([True, False, True, False, True]))
    assert torch.equal(combined[1, 0, 0], torch.tensor([True, False, False, False, False]))


def test_padding_mask_bad_input():
    with pytest.raises(ValueError, match=r"tokens must be a \(batch, length\) tensor of token ids, got \(5,\)"):
        padding_mask(torch.tensor([1, 2, 0, 0, 0]), 0)
    with pytest.raises(ValueError, match="got list"):
        padding_mask([[1, 2]], 0)
    with pytest.raises(TypeError, match="tokens must hold integer token ids, got dtype torch.float32"):
        padding_mask(torch.ones(2, 3), 0)
    with pytest.raises(TypeError, match="integer token ids, got dtype torch.bool"):
        padding_mask(torch.ones(2, 3, dtype=torch.bool), 0)


def test_check_mask():
    check_mask(causal_mask(4), (2, 3, 4, 4))  # broadcasts: no error
    check_mask(torch.ones(2, 1, 1, 4, dtype=torch.bool), (2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"src_mask of shape \(4, 5\) does not broadcast to the attention scores' shape \(2, 3, 4, 4\)"):
        check_mask(torch.ones(4, 5, dtype=torch.bool), (2, 3, 4, 4), name="src_mask")
    # Broadcasting must not grow the scores: a mask with a larger batch is an error too.
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(torch.ones(3, 1, 4, 4, dtype=torch.bool), (1, 3, 4, 4))
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(torch.ones(1, 2, 3, 4, 4, dtype=torch.bool), (2, 3, 4, 4))
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor \(True = may attend\), got dtype torch.float32"):
        check_mask(torch.ones(4, 4), (2, 3, 4, 4))
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor, got ndarray"):
        import numpy as np

        check_mask(np.ones((4, 4), dtype=bool), (2, 3, 4, 4))
