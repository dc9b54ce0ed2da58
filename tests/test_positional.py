"""Sinusoidal positional encoding (Section 3.5): known values and identities."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import assert_parity

from aiayn import PositionalEncoding, offset_matrix, sinusoidal_encoding
from aiayn.positional import frequencies

F64 = torch.float64


@pytest.mark.parametrize("d_model", [2, 8, 16, 512])
def test_values_at_known_points(d_model):
    pe = sinusoidal_encoding(60, d_model, dtype=F64)
    assert pe.shape == (60, d_model) and pe.dtype == F64
    # Position 0: sin(0) = 0 in even columns, cos(0) = 1 in odd columns.
    expected0 = torch.tensor([0.0, 1.0] * (d_model // 2), dtype=F64)
    assert torch.equal(pe[0], expected0)
    pos = torch.arange(60, dtype=F64)
    # The first pair has frequency 1: PE[pos, 0] = sin(pos), PE[pos, 1] = cos(pos).
    assert_parity(pe[:, 0], torch.sin(pos), "PE[:, 0]")
    assert_parity(pe[:, 1], torch.cos(pos), "PE[:, 1]")
    # The last pair (2i = d - 2) has frequency 10000^(-(d-2)/d).
    omega = 10000.0 ** (-(d_model - 2) / d_model)
    assert_parity(pe[:, -2], torch.sin(pos * omega), "PE[:, d-2]")
    assert_parity(pe[:, -1], torch.cos(pos * omega), "PE[:, d-1]")
    # Every pair, straight from the paper's formula.
    for i in range(0, d_model, 2):
        w = 1.0 / 10000.0 ** (i / d_model)
        assert_parity(pe[:, i], torch.sin(pos * w), f"PE[:, {i}]")
        assert_parity(pe[:, i + 1], torch.cos(pos * w), f"PE[:, {i + 1}]")


def test_known_scalar_values():
    pe = sinusoidal_encoding(10, 4, dtype=F64)
    # d=4: frequencies 1 and 10000^(-1/2) = 0.01.
    assert pe[3].tolist() == pytest.approx(
        [math.sin(3), math.cos(3), math.sin(0.03), math.cos(0.03)], abs=1e-15)


def test_range_and_dtype():
    pe = sinusoidal_encoding(2000, 64)
    assert pe.dtype == torch.get_default_dtype()
    assert pe.abs().max() <= 1.0
    assert pe.min() < -0.99 and pe.max() > 0.99
    # sin^2 + cos^2 = 1 for every pair.
    pe64 = sinusoidal_encoding(2000, 64, dtype=F64)
    assert_parity(pe64[:, 0::2] ** 2 + pe64[:, 1::2] ** 2, torch.ones(2000, 32, dtype=F64), "norm")


def test_frequencies():
    w = frequencies(8)
    assert w.dtype == F64 and w.shape == (4,)
    assert_parity(w, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=F64), "frequencies")


@pytest.mark.parametrize("d_model", [4, 16])
@pytest.mark.parametrize("k", [0, 1, 3, 17, -5])
def test_offset_matrix_shifts_positions(d_model, k):
    pe = sinusoidal_encoding(200, d_model, dtype=F64)
    m = offset_matrix(k, d_model, dtype=F64)
    assert m.shape == (d_model, d_model)
    for p in (5, 10, 42, 99):
        assert_parity(pe[p] @ m.T, pe[p + k], f"PE[{p}+{k}]")
    # All positions at once: the map depends on k only, not on p.
    rows = torch.arange(5, 150)
    assert_parity(pe[rows] @ m.T, pe[rows + k], "all p")


def test_offset_matrix_is_a_rotation():
    m = offset_matrix(7, 8, dtype=F64)
    assert_parity(m @ m.T, torch.eye(8, dtype=F64), "orthogonal")
    assert_parity(offset_matrix(0, 8, dtype=F64), torch.eye(8, dtype=F64), "identity")
    assert_parity(offset_matrix(3, 8, dtype=F64) @ offset_matrix(4, 8, dtype=F64), m, "composition")
    with pytest.raises(TypeError, match="k must be an int offset, got float"):
        offset_matrix(1.5, 8)
    with pytest.raises(ValueError, match="d_model must be a positive even int"):
        offset_matrix(1, 7)


@pytest.mark.parametrize("bad", [0, 3, -2, 2.0, True])
def test_bad_d_model(bad):
    with pytest.raises(ValueError, match=r"d_model must be a positive even int \(sine and cosine come in pairs\)"):
        sinusoidal_encoding(10, bad)


@pytest.mark.parametrize("bad", [0, -1, 1.0])
def test_bad_n_positions(bad):
    with pytest.raises(ValueError, match="n_positions must be a positive int"):
        sinusoidal_encoding(bad, 8)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_positional_encoding_adds_the_table(dtype):
    torch.manual_seed(0)
    module = PositionalEncoding(16, max_len=10).eval()
    x = torch.randn(3, 7, 16, dtype=dtype)
    out = module(x)
    assert out.shape == x.shape and out.dtype == dtype
    # Exactly x + the table, broadcast over the batch: the float32 buffer, or for float64
    # input a table computed in float64 (the buffer's lost digits cannot be recovered).
    table = sinusoidal_encoding(7, 16, F64) if dtype == F64 else module.pe[:7].to(dtype)
    assert torch.equal(out, x + table)
    assert_parity(module.pe.to(F64), sinusoidal_encoding(10, 16, dtype=F64).to(module.pe.dtype).to(F64),
                  "table")
    # The table is a buffer: not a parameter, not in the state dict.
    assert list(module.parameters()) == []
    assert "pe" not in module.state_dict()
    assert module.pe.shape == (10, 16)
    assert module.double().pe.dtype == F64  # moves with .to()/.double()


def test_positional_encoding_float32_matches_formula():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16)
    out = PositionalEncoding(16, max_len=10)(x)
    assert_parity(out, x + sinusoidal_encoding(7, 16, dtype=torch.float32), "x + PE")


def test_positional_encoding_float64_matches_formula():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16, dtype=F64)
    out = PositionalEncoding(16, max_len=10).double()(x)
    # .double() cannot restore digits the float32 buffer lost; float64 input gets a float64 table.
    torch.testing.assert_close(out, x + sinusoidal_encoding(7, 16, dtype=F64), rtol=0, atol=1e-10)


def test_positional_encoding_max_len_exactly_and_too_long():
    module = PositionalEncoding(8, max_len=5)
    assert module(torch.zeros(1, 5, 8)).shape == (1, 5, 8)
    with pytest.raises(ValueError, match="sequence length 6 exceeds max_len=5"):
        module(torch.zeros(1, 6, 8))


def test_positional_encoding_bad_input():
    module = PositionalEncoding(8, max_len=5)
    with pytest.raises(ValueError, match=r"x must have d_model=8 features, got shape \(1, 3, 6\)"):
        module(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions, got shape \(3, 8\)"):
        module(torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"x must not be empty, got shape \(1, 0, 8\)"):
        module(torch.zeros(1, 0, 8))
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        PositionalEncoding(8, dropout=1.0)


def test_positional_encoding_dropout_only_in_training():
    torch.manual_seed(1)
    module = PositionalEncoding(8, max_len=5, dropout=0.5)
    x = torch.randn(2, 5, 8)
    module.train()
    out = module(x)
    kept = out != 0
    assert (~kept).any() and kept.any()
    assert_parity(out[kept], 2.0 * (x + module.pe)[kept.expand_as(x)], "inverted dropout")
    module.eval()
    assert_parity(module(x), x + module.pe, "eval")
