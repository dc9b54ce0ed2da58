"""scaled_dot_product_attention and MultiHeadAttention: parity with torch, masks, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE_DTYPES, DTYPES, assert_parity, compare_modules, copy_weights, randomize_
from torch import nn

from aiayn import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention

B, H, D_MODEL = 3, 4, 16
D_K = D_MODEL // H
MASKS = ["none", "causal", "padding", "causal+padding"]


def make_mask(kind: str, batch: int, t_len: int, s_len: int, device="cpu") -> torch.Tensor | None:
    """Boolean, True = may attend. 'causal' for T != S is the lower triangle aligned to the
    last key (query t sees keys <= t + S - T); padding leaves at least 3 keys per sequence,
    so that no query row is fully masked (torch would give NaN there, we give zeros)."""
    masks = []
    if "causal" in kind:
        masks.append(torch.ones(t_len, s_len, dtype=torch.bool, device=device).tril(s_len - t_len))
    if "padding" in kind:
        lengths = torch.tensor([s_len, s_len - 2, 3][:batch], device=device)
        tokens = torch.where(torch.arange(s_len, device=device) < lengths[:, None], 1, 0)
        masks.append(padding_mask(tokens, pad_id=0))  # (B, 1, 1, S)
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = out & m
    return out


def torch_masks(mask_kind: str, batch: int, t_len: int, s_len: int, device="cpu"):
    """The same masks in nn.MultiheadAttention's convention (True = NOT allowed)."""
    attn_mask = key_padding_mask = None
    if "causal" in mask_kind:
        attn_mask = ~make_mask("causal", batch, t_len, s_len, device)  # (T, S)
    if "padding" in mask_kind:
        key_padding_mask = ~make_mask("padding", batch, t_len, s_len, device)[:, 0, 0, :]  # (B, S)
    return attn_mask, key_padding_mask


# ------------------------------------------------------------ scaled dot-product attention


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("t_len,s_len", [(5, 5), (4, 7)], ids=["self", "cross"])
def test_sdpa_matches_torch(device, dtype, mask_kind, t_len, s_len):
    torch.manual_seed(0)
    q = torch.randn(B, H, t_len, D_K, dtype=dtype, device=device)
    k = torch.randn(B, H, s_len, D_K, dtype=dtype, device=device)
    v = torch.randn(B, H, s_len, D_K + 1, dtype=dtype, device=device)  # d_v != d_k on purpose
    mask = make_mask(mask_kind, B, t_len, s_len, device)

    def ours(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)[0]

    def theirs(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    compare_modules(nn.Module(), nn.Module(), ours, theirs, [q, k, v], f"sdpa {mask_kind}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", MASKS)
def test_sdpa_weights_are_the_softmax(dtype, mask_kind):
    torch.manual_seed(1)
    q = torch.randn(B, H, 5, D_K, dtype=dtype)
    k = torch.randn(B, H, 6, D_K, dtype=dtype)
    v = torch.randn(B, H, 6, D_K, dtype=dtype)
    mask = make_mask(mask_kind, B, 5, 6)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D_K)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert weights.shape == (B, H, 5, 6)
    assert_parity(weights, torch.softmax(scores, dim=-1), "weights")
    assert_parity(weights.sum(-1), torch.ones(B, H, 5, dtype=dtype), "row sums")
    assert_parity(out, weights @ v, "output = weights @ value")


def test_sdpa_scale_argument():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 4, dtype=torch.float64) for _ in range(3))
    _, w = scaled_dot_product_attention(q, k, v, scale=0.7)
    assert_parity(w, torch.softmax(q @ k.transpose(-2, -1) * 0.7, -1), "scale")
    # Extreme temperatures (the widget's slider ends) stay finite.
    for scale in (100.0 / math.sqrt(4), 0.01 / math.sqrt(4), 1e4):
        _, w = scaled_dot_product_attention(q, k, v, causal_mask(3), scale=scale)
        assert torch.isfinite(w).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale must be a finite number"):
        scaled_dot_product_attention(q, k, v, scale=float("inf"))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)


# ---------------------------------------------------------------- multi-head attention


def make_mha_pair(dtype, device, seed=0, bias=True):
    ours = MultiHeadAttention(D_MODEL, H, bias=bias)
    randomize_(ours, seed=seed)
    theirs = nn.MultiheadAttention(D_MODEL, H, bias=bias, batch_first=True)
    copy_weights(ours, theirs)
    return ours.to(device, dtype).eval(), theirs.to(device, dtype).eval()


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("t_len,s_len", [(5, 5), (4, 7)], ids=["self", "cross"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_mha_matches_torch(device, dtype, mask_kind, t_len, s_len, need_weights):
    torch.manual_seed(0)
    ours, theirs = make_mha_pair(dtype, device)
    x = torch.randn(B, t_len, D_MODEL, dtype=dtype, device=device)
    if t_len == s_len:  # self-attention: one input used three times
        inputs = [x]

        def split(*xs):
            return xs[0], xs[0], xs[0]
    else:  # cross-attention: queries from x, keys from memory, values from a third tensor
        memory = torch.randn(B, s_len, D_MODEL, dtype=dtype, device=device)
        values = torch.randn(B, s_len, D_MODEL, dtype=dtype, device=device)
        inputs = [x, memory, values]

        def split(*xs):
            return xs
    mask = make_mask(mask_kind, B, t_len, s_len, device)
    attn_mask, key_padding_mask = torch_masks(mask_kind, B, t_len, s_len, device)

    def run_ours(*xs):
        return ours(*split(*xs), mask=mask, need_weights=need_weights)

    def run_theirs(*xs):
        out, weights = theirs(*split(*xs), attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                              need_weights=need_weights, average_attn_weights=False)
        return (out, weights) if need_weights else out

    compare_modules(ours, theirs, run_ours, run_theirs, inputs,
                    f"MHA {mask_kind} {'explicit' if need_weights else 'fused'}")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("mask_kind", MASKS)
def test_mha_fused_equals_explicit(device, dtype, mask_kind):
    torch.manual_seed(3)
    ours, _ = make_mha_pair(dtype, device, seed=3)
    x = torch.randn(B, 5, D_MODEL, dtype=dtype, device=device)
    memory = torch.randn(B, 6, D_MODEL, dtype=dtype, device=device)
    mask = make_mask(mask_kind, B, 5, 6, device)
    fused = ours(x, memory, memory, mask)
    explicit, weights = ours(x, memory, memory, mask, need_weights=True)
    assert isinstance(fused, torch.Tensor)
    assert fused.shape == explicit.shape == (B, 5, D_MODEL)
    assert weights.shape == (B, H, 5, 6)
    assert_parity(fused, explicit, "fused vs explicit")


def test_mha_attributes_and_no_bias():
    mha = MultiHeadAttention(32, 8, dropout=0.1)
    assert (mha.d_model, mha.n_heads, mha.d_k) == (32, 8, 4)
    assert all(isinstance(getattr(mha, n), nn.Linear) for n in ("w_q", "w_k", "w_v", "w_o"))
    assert "d_k=4" in repr(mha)
    no_bias = MultiHeadAttention(32, 8, bias=False)
    assert all(getattr(no_bias, n).bias is None for n in ("w_q", "w_k", "w_v", "w_o"))


def test_mha_dropout_only_in_training():
    torch.manual_seed(4)
    mha = MultiHeadAttention(D_MODEL, H, dropout=0.5)
    x = torch.randn(2, 5, D_MODEL)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x), rtol=0, atol=0)
    mha.train()
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))



def test_attention_dropout_is_applied_to_the_weights_that_mix_the_values():
    """The explicit path returns the weights before dropout, and mixes the values with the
    dropped-out ones: the output is F.dropout(weights) @ value under the same random state."""
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, H, 5, D_K, dtype=torch.float64) for _ in range(3))
    torch.manual_seed(11)
    output, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(11)
    mixing = F.dropout(weights, p=0.5)  # the same mask: the same generator state
    assert (mixing == 0).any() and torch.allclose(weights.sum(-1), torch.ones(2, H, 5, dtype=torch.float64))
    torch.testing.assert_close(output, mixing @ v, rtol=0, atol=1e-12)
    assert not torch.allclose(output, weights @ v)  # dropout reached the output


def test_mha_explicit_path_applies_dropout_in_training():
    torch.manual_seed(4)
    mha = MultiHeadAttention(D_MODEL, H, dropout=0.5).double()
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    mha.eval()
    evaluated, eval_weights = mha(x, x, x, need_weights=True)
    mha.train()
    torch.manual_seed(9)
    trained, weights = mha(x, x, x, need_weights=True)
    torch.testing.assert_close(weights, eval_weights)  # the weights are returned before dropout
    assert not torch.allclose(trained, evaluated)
    # rebuild the output from the weights, with the dropout mask the module drew
    torch.manual_seed(9)
    mixing = F.dropout(weights, p=0.5)
    v = mha.w_v(x).view(2, 5, H, D_K).transpose(1, 2)  # (B, T, d_model) -> (B, H, T, d_k)
    heads = (mixing @ v).transpose(1, 2).reshape(2, 5, D_MODEL)  # (B, H, T, d_k) -> (B, T, d_model)
    torch.testing.assert_close(trained, mha.w_o(heads), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------ mask semantics


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_masked_keys_get_zero_weight_and_do_not_matter(need_weights):
    torch.manual_seed(5)
    mha = randomize_(MultiHeadAttention(D_MODEL, H), seed=5).double()
    x = torch.randn(B, 5, D_MODEL, dtype=torch.float64)
    memory = torch.randn(B, 7, D_MODEL, dtype=torch.float64)
    mask = make_mask("causal+padding", B, 5, 7)
    full = mask.expand(B, H, 5, 7)
    if need_weights:
        _, weights = mha(x, memory, memory, mask, need_weights=True)
        assert (weights[~full] == 0).all()  # exactly zero, not merely small
        assert (weights[full] > 0).all()
    # Changing what sits at masked key positions does not change the output.
    hidden = ~mask.any(dim=(1, 2))  # (B, S): keys that no query may see
    assert hidden.any()
    other = memory.clone()
    other[hidden] = 100.0 * torch.randn_like(other[hidden])
    out1 = mha(x, memory, memory, mask, need_weights=need_weights)
    out2 = mha(x, other, other, mask, need_weights=need_weights)
    if need_weights:
        out1, out2 = out1[0], out2[0]
    assert_parity(out1, out2, "masked keys changed")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_fully_masked_rows_are_zero_without_nan(dtype):
    torch.manual_seed(6)
    q, k, v = (torch.randn(2, H, 4, D_K, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[0, :, 1, :] = False  # query 1 of sequence 0 may attend to nothing
    mask[1] = False  # sequence 1 is fully masked
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights[0, :, 1] == 0).all() and (weights[1] == 0).all()
    assert (out[0, :, 1] == 0).all() and (out[1] == 0).all()
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    (out.sum() + (weights * torch.randn_like(weights)).sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    # The fully masked rows take no part in the gradient of the query.
    assert (q.grad[1] == 0).all()
    # Rows that do have keys are unaffected: same as the unmasked row computation.
    ref = F.scaled_dot_product_attention(q[0:1], k[0:1], v[0:1])
    assert_parity(out[0:1, :, [0, 2, 3]], ref[:, :, [0, 2, 3]], "other rows")


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("bias", [True, False])
def test_mha_fully_masked_rows_are_zero_without_nan(need_weights, bias):
    torch.manual_seed(7)
    mha = randomize_(MultiHeadAttention(D_MODEL, H, bias=bias), seed=7).double()
    x = torch.randn(2, 4, D_MODEL, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 5, D_MODEL, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    mask[0, :, 2, :] = False
    mask[1] = False
    result = mha(x, memory, memory, mask, need_weights=need_weights)
    out = result[0] if need_weights else result
    if need_weights:
        weights = result[1]
        assert (weights[0, :, 2] == 0).all() and (weights[1] == 0).all()
    # The heads output zeros, so what is left is the output projection's bias.
    zero_row = mha.w_o.bias if bias else torch.zeros(D_MODEL, dtype=torch.float64)
    assert_parity(out[0, 2], zero_row, "fully masked row")
    assert_parity(out[1], zero_row.expand(4, D_MODEL), "fully masked sequence")
    assert torch.isfinite(out).all()
    out.pow(2).sum().backward()
    grads = [x.grad, memory.grad] + [p.grad for p in mha.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)
    assert (memory.grad[1] == 0).all()  # nothing of sequence 1's memory was used


# ----------------------------------------------------------------------------- bad input


def test_mha_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by n_heads \(3\)"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        MultiHeadAttention(16, 0)
    with pytest.raises(ValueError, match="d_model must be a positive int"):
        MultiHeadAttention(16.0, 2)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        MultiHeadAttention(16, 2, dropout=1.0)


@pytest.fixture
def mha():
    return MultiHeadAttention(D_MODEL, H)


def test_mha_mismatched_batch(mha):
    q = torch.randn(2, 5, D_MODEL)
    kv = torch.randn(3, 5, D_MODEL)
    with pytest.raises(ValueError, match=r"same batch size, got 2, 3, 3"):
        mha(q, kv, kv)


def test_mha_mismatched_features(mha):
    q = torch.randn(2, 5, D_MODEL)
    k = torch.randn(2, 5, D_MODEL + 1)
    with pytest.raises(ValueError, match=r"key must have d_model=16 features, got shape \(2, 5, 17\)"):
        mha(q, k, k)
    with pytest.raises(ValueError, match=r"query must have d_model=16 features"):
        mha(k, q, q)


def test_mha_mismatched_key_value_length(mha):
    q = torch.randn(2, 5, D_MODEL)
    with pytest.raises(ValueError, match="key and value must have the same length S, got 5 and 4"):
        mha(q, q, torch.randn(2, 4, D_MODEL))


def test_mha_wrong_rank_and_type(mha):
    with pytest.raises(ValueError, match=r"query must have 3 dimensions, got shape \(5, 16\)"):
        mha(torch.randn(5, D_MODEL), torch.randn(5, D_MODEL), torch.randn(5, D_MODEL))
    with pytest.raises(TypeError, match="query must be a floating-point tensor"):
        x = torch.ones(2, 5, D_MODEL, dtype=torch.long)
        mha(x, x, x)
    with pytest.raises(TypeError, match="query must be a torch.Tensor, got list"):
        mha([[0.0]], torch.randn(2, 5, D_MODEL), torch.randn(2, 5, D_MODEL))


def test_mha_mask_that_does_not_broadcast(mha):
    x = torch.randn(2, 5, D_MODEL)
    for bad in (torch.ones(6, 6, dtype=torch.bool), torch.ones(3, 1, 1, 5, dtype=torch.bool),
                torch.ones(2, 3, 5, 5, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"does not broadcast to the attention scores' shape \(2, 4, 5, 5\)"):
            mha(x, x, x, bad)
        with pytest.raises(ValueError, match="does not broadcast"):
            mha(x, x, x, bad, need_weights=True)


def test_mha_non_boolean_mask(mha):
    x = torch.randn(2, 5, D_MODEL)
    for bad in (torch.ones(5, 5), causal_mask(5).long()):
        with pytest.raises(TypeError, match=r"mask must be a boolean tensor \(True = may attend\)"):
            mha(x, x, x, bad)
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor, got list"):
        mha(x, x, x, [[True]])


def test_mha_empty_sequence(mha):
    x = torch.randn(2, 5, D_MODEL)
    empty = torch.randn(2, 0, D_MODEL)
    with pytest.raises(ValueError, match=r"query must not be empty, got shape \(2, 0, 16\)"):
        mha(empty, x, x)
    with pytest.raises(ValueError, match="key must not be empty"):
        mha(x, empty, empty)


def test_sdpa_bad_input():
    q = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"same batch dimensions, got \(2,\), \(3,\), \(3,\)"):
        scaled_dot_product_attention(q, torch.randn(3, 5, 4), torch.randn(3, 5, 4))
    with pytest.raises(ValueError, match="same feature size d_k, got 4 and 3"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 3), torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="key and value must have the same length S, got 5 and 6"):
        scaled_dot_product_attention(q, q, torch.randn(2, 6, 4))
    with pytest.raises(ValueError, match="same number of dimensions"):
        scaled_dot_product_attention(q, q[0], q[0])
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        scaled_dot_product_attention(q[0, 0], q[0, 0], q[0, 0])
    with pytest.raises(TypeError, match="share a dtype"):
        scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 6\) does not broadcast"):
        scaled_dot_product_attention(q, q, q, torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(TypeError, match="must be a boolean tensor"):
        scaled_dot_product_attention(q, q, q, torch.ones(5, 5, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"query must not be empty, got shape \(2, 0, 4\)"):
        scaled_dot_product_attention(q[:, :0], q, q)
