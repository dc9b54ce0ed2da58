"""FeedForward, EncoderLayer/DecoderLayer and the N-layer stacks against torch.nn."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE_DTYPES, DTYPES, assert_parity, compare_modules, copy_weights, randomize_
from torch import nn

from aiayn import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    causal_mask,
    padding_mask,
)

B, S, T, D_MODEL, H, D_FF = 3, 6, 5, 16, 4, 32
NORM_FIRST = [pytest.param(False, id="post-ln"), pytest.param(True, id="pre-ln")]
WITH_MASKS = [pytest.param(False, id="no-mask"), pytest.param(True, id="masks")]


def src_tokens(device) -> torch.Tensor:
    """Lengths 6, 4, 2: padding at the end of the last two sequences (pad id 0)."""
    lengths = torch.tensor([S, S - 2, 2], device=device)
    return torch.where(torch.arange(S, device=device) < lengths[:, None], 1, 0)


def torch_kwargs(dtype, norm_first):
    return dict(dim_feedforward=D_FF, dropout=0.0, activation="relu", batch_first=True,
                norm_first=norm_first, dtype=dtype)


def encoder_case(device, dtype, with_masks):
    """Inputs and masks for an encoder: ours (True = may attend), torch's (True = padding)."""
    x = torch.randn(B, S, D_MODEL, dtype=dtype, device=device)
    if not with_masks:
        return x, None, None
    keep = padding_mask(src_tokens(device), pad_id=0)  # (B, 1, 1, S)
    return x, keep, ~keep[:, 0, 0, :]


def decoder_case(device, dtype, with_masks):
    x = torch.randn(B, T, D_MODEL, dtype=dtype, device=device)
    memory = torch.randn(B, S, D_MODEL, dtype=dtype, device=device)
    if not with_masks:
        return x, memory, {}, {}
    causal = causal_mask(T, device=device)  # (T, T)
    keep = padding_mask(src_tokens(device), pad_id=0)  # (B, 1, 1, S)
    ours = dict(tgt_mask=causal, memory_mask=keep)
    theirs = dict(tgt_mask=~causal, memory_key_padding_mask=~keep[:, 0, 0, :])
    return x, memory, ours, theirs


# ---------------------------------------------------------------------------- layers


def test_feed_forward_is_eq2():
    torch.manual_seed(0)
    ff = FeedForward(D_MODEL, D_FF).double()
    x = torch.randn(B, T, D_MODEL, dtype=torch.float64)
    w1, b1, w2, b2 = ff.linear1.weight, ff.linear1.bias, ff.linear2.weight, ff.linear2.bias
    assert w1.shape == (D_FF, D_MODEL) and w2.shape == (D_MODEL, D_FF)
    assert_parity(ff(x), torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2, "FFN(x)")
    # Position-wise: each position on its own.
    assert_parity(ff(x[:, 2:3]), ff(x)[:, 2:3], "position-wise")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("norm_first", NORM_FIRST)
@pytest.mark.parametrize("with_masks", WITH_MASKS)
def test_encoder_layer_matches_torch(device, dtype, norm_first, with_masks):
    torch.manual_seed(0)
    ours = randomize_(EncoderLayer(D_MODEL, H, D_FF, dropout=0.0, norm_first=norm_first), seed=1)
    theirs = nn.TransformerEncoderLayer(D_MODEL, H, **torch_kwargs(dtype, norm_first))
    copy_weights(ours, theirs)
    ours, theirs = ours.to(device, dtype).eval(), theirs.to(device).eval()
    x, mask, key_padding = encoder_case(device, dtype, with_masks)
    compare_modules(
        ours, theirs,
        lambda x: ours(x, mask),
        lambda x: theirs(x, src_key_padding_mask=key_padding),
        [x], f"EncoderLayer norm_first={norm_first}")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("norm_first", NORM_FIRST)
@pytest.mark.parametrize("with_masks", WITH_MASKS)
def test_decoder_layer_matches_torch(device, dtype, norm_first, with_masks):
    torch.manual_seed(0)
    ours = randomize_(DecoderLayer(D_MODEL, H, D_FF, dropout=0.0, norm_first=norm_first), seed=2)
    theirs = nn.TransformerDecoderLayer(D_MODEL, H, **torch_kwargs(dtype, norm_first))
    copy_weights(ours, theirs)
    ours, theirs = ours.to(device, dtype).eval(), theirs.to(device).eval()
    x, memory, ours_masks, theirs_masks = decoder_case(device, dtype, with_masks)
    compare_modules(
        ours, theirs,
        lambda x, m: ours(x, m, **ours_masks),
        lambda x, m: theirs(x, m, **theirs_masks),
        [x, memory], f"DecoderLayer norm_first={norm_first}")


# ---------------------------------------------------------------------------- stacks


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", NORM_FIRST)
def test_encoder_stack_matches_torch(dtype, norm_first):
    torch.manual_seed(0)
    ours = randomize_(Encoder(2, D_MODEL, H, D_FF, dropout=0.0, norm_first=norm_first), seed=3)
    layer = nn.TransformerEncoderLayer(D_MODEL, H, **torch_kwargs(dtype, norm_first))
    final_norm = nn.LayerNorm(D_MODEL, dtype=dtype) if norm_first else None
    theirs = nn.TransformerEncoder(layer, num_layers=2, norm=final_norm, enable_nested_tensor=False)
    copy_weights(ours, theirs)
    ours, theirs = ours.to(dtype).eval(), theirs.eval()
    x, mask, key_padding = encoder_case("cpu", dtype, with_masks=True)
    compare_modules(
        ours, theirs,
        lambda x: ours(x, mask),
        lambda x: theirs(x, src_key_padding_mask=key_padding),
        [x], f"Encoder norm_first={norm_first}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", NORM_FIRST)
def test_decoder_stack_matches_torch(dtype, norm_first):
    torch.manual_seed(0)
    ours = randomize_(Decoder(2, D_MODEL, H, D_FF, dropout=0.0, norm_first=norm_first), seed=4)
    layer = nn.TransformerDecoderLayer(D_MODEL, H, **torch_kwargs(dtype, norm_first))
    final_norm = nn.LayerNorm(D_MODEL, dtype=dtype) if norm_first else None
    theirs = nn.TransformerDecoder(layer, num_layers=2, norm=final_norm)
    copy_weights(ours, theirs)
    ours, theirs = ours.to(dtype).eval(), theirs.eval()
    x, memory, ours_masks, theirs_masks = decoder_case("cpu", dtype, with_masks=True)
    compare_modules(
        ours, theirs,
        lambda x, m: ours(x, m, **ours_masks),
        lambda x, m: theirs(x, m, **theirs_masks),
        [x, memory], f"Decoder norm_first={norm_first}")


@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_structure(norm_first):
    enc = Encoder(3, D_MODEL, H, D_FF, dropout=0.1, norm_first=norm_first)
    dec = Decoder(2, D_MODEL, H, D_FF, dropout=0.1, norm_first=norm_first)
    assert len(enc.layers) == 3 and len(dec.layers) == 2
    assert all(layer.norm_first == norm_first for layer in [*enc.layers, *dec.layers])
    # A final LayerNorm only for Pre-LN (Post-LN layers already end in one).
    for stack in (enc, dec):
        assert isinstance(stack.norm, nn.LayerNorm if norm_first else nn.Identity)
    # The layers are independent copies, not one module repeated.
    assert enc.layers[0].self_attn.w_q.weight is not enc.layers[1].self_attn.w_q.weight


def test_layers_keep_shapes_and_dropout_only_in_training():
    torch.manual_seed(5)
    layer = DecoderLayer(D_MODEL, H, D_FF, dropout=0.3)
    x, memory = torch.randn(2, T, D_MODEL), torch.randn(2, S, D_MODEL)
    layer.eval()
    out = layer(x, memory, causal_mask(T))
    assert out.shape == (2, T, D_MODEL)
    assert torch.equal(out, layer(x, memory, causal_mask(T)))
    layer.train()
    assert not torch.allclose(layer(x, memory), layer(x, memory))


def test_layers_reject_bad_masks():
    layer = EncoderLayer(D_MODEL, H, D_FF)
    x = torch.randn(2, S, D_MODEL)
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(x, torch.ones(S + 1, S + 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="must be a boolean tensor"):
        layer(x, torch.ones(S, S))
    with pytest.raises(ValueError, match=r"d_model \(16\) must be divisible by n_heads \(3\)"):
        DecoderLayer(D_MODEL, 3, D_FF)
