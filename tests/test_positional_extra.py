"""Chapter 5 additions: wavelengths, the learned table, the previous-token task, the
extrapolation probe, and the positional plots and explorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import assert_parity
from matplotlib.figure import Figure

import aiayn.figures.positions
from aiayn import EncoderLayer, MultiHeadAttention, offset_matrix, sinusoidal_encoding
from aiayn.experiments.extrapolation import (
    PositionProbe,
    accuracy_by_length,
    accuracy_by_position,
    train_probe,
)
from aiayn.figures.positions import (
    plot_accuracy_curves,
    plot_positional_encoding,
    plot_positional_view,
)
from aiayn.learning.data import IGNORE_INDEX, previous_token_task
from aiayn.positional import LearnedPositionalEncoding, frequencies, wavelengths

F64 = torch.float64


# ------------------------------------------------------------------ wavelengths


@pytest.mark.parametrize("d_model", [2, 8, 512])
def test_wavelengths_first_last_and_geometric(d_model):
    lam = wavelengths(d_model)
    assert lam.shape == (d_model // 2,) and lam.dtype == F64
    assert lam[0].item() == pytest.approx(2 * math.pi, abs=1e-12)
    # The last pair has 2i = d - 2: short of 10000 * 2 pi by the factor 10000^(-2/d).
    last = 2 * math.pi * 10000 ** ((d_model - 2) / d_model)
    assert lam[-1].item() == pytest.approx(last, rel=1e-12)
    assert lam[-1].item() < 2 * math.pi * 10000
    if d_model > 2:  # a geometric progression with ratio 10000^(2/d)
        ratios = lam[1:] / lam[:-1]
        assert_parity(ratios, torch.full_like(ratios, 10000 ** (2 / d_model)), "ratio")
    # Wavelength 2 pi / omega: PE column 2i repeats after it (checked where it is an integer).
    assert_parity(lam * frequencies(d_model), torch.full_like(lam, 2 * math.pi), "2 pi")


def test_wavelength_512_values():
    lam = wavelengths(512)
    assert lam[-1].item() == pytest.approx(60611.4772, abs=1e-3)
    assert lam[-1].item() / (2 * math.pi * 10000) == pytest.approx(0.96466, abs=1e-5)


# ------------------------------------------------- equivariance (used by the chapter)


def test_attention_is_permutation_equivariant_without_positions():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).double().eval()
    layer = EncoderLayer(16, 4, 32, dropout=0.0).double().eval()
    x = torch.randn(2, 7, 16, dtype=F64)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    for f in (lambda t: mha(t, t, t), layer):
        assert_parity(f(x[:, perm]), f(x)[:, perm], "f(Px) = P f(x)")
        assert (f(x[:, perm]) - f(x)).abs().max() > 0.1  # equivariant, not invariant
    # With the encoding added first, the permutation no longer just reorders the output.
    pe = sinusoidal_encoding(7, 16, F64)
    assert (layer(x[:, perm] + pe) - layer(x + pe)[:, perm]).abs().max() > 0.1


def test_offset_matrix_negative_is_the_inverse():
    m = offset_matrix(5, 16, dtype=F64)
    assert_parity(offset_matrix(-5, 16, dtype=F64), m.T, "M_-k = M_k^T")


# ------------------------------------------------------------- learned table


def test_learned_positional_encoding_adds_its_table():
    torch.manual_seed(0)
    module = LearnedPositionalEncoding(6, max_len=10)
    assert module.table.shape == (10, 6) and module.table.requires_grad
    x = torch.randn(3, 4, 6)
    assert torch.equal(module(x), x + module.table[:4])
    assert module(x.double()).dtype == F64
    assert module(torch.zeros(1, 10, 6)).shape == (1, 10, 6)  # max_len exactly
    # Only the rows of positions that occur get a gradient.
    module(x).sum().backward()
    assert module.table.grad[:4].abs().min() > 0
    assert torch.all(module.table.grad[4:] == 0)


def test_learned_positional_encoding_errors():
    module = LearnedPositionalEncoding(8, max_len=5)
    with pytest.raises(ValueError, match="sequence length 6 exceeds max_len=5: a learned table"):
        module(torch.zeros(1, 6, 8))
    with pytest.raises(ValueError, match=r"x must have d_model=8 features, got shape \(1, 3, 6\)"):
        module(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions"):
        module(torch.zeros(3, 8))
    for kwargs, message in [
        (dict(d_model=0, max_len=5), "d_model must be a positive int, got 0"),
        (dict(d_model=8, max_len=0), "max_len must be a positive int, got 0"),
        (dict(d_model=8, max_len=2.0), "max_len must be a positive int, got 2.0"),
        (dict(d_model=8, max_len=5, dropout=1.0), r"dropout must be in \[0, 1\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            LearnedPositionalEncoding(**kwargs)


def test_learned_dropout_only_in_training():
    torch.manual_seed(2)
    module = LearnedPositionalEncoding(8, max_len=5, dropout=0.5)
    x = torch.randn(2, 5, 8)
    assert (module(x) == 0).any()
    assert torch.equal(module.eval()(x), x + module.table)


# ------------------------------------------------------------------ the task


def test_previous_token_task():
    gen = torch.Generator().manual_seed(0)
    inputs, targets = previous_token_task(4, 9, 5, generator=gen)
    assert inputs.shape == targets.shape == (4, 9) and inputs.dtype == torch.int64
    assert inputs.min() >= 0 and inputs.max() < 5
    assert torch.all(targets[:, 0] == IGNORE_INDEX)
    assert torch.equal(targets[:, 1:], inputs[:, :-1])
    _, t3 = previous_token_task(2, 6, 5, offset=3, generator=gen)
    assert torch.all(t3[:, :3] == IGNORE_INDEX) and torch.all(t3[:, 3:] >= 0)
    # Seeded: the same generator state gives the same batch.
    a = previous_token_task(3, 5, 7, generator=torch.Generator().manual_seed(1))
    b = previous_token_task(3, 5, 7, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("kwargs,message", [
    (dict(batch_size=0), "batch_size must be a positive int, got 0"),
    (dict(length=1), "length must exceed offset=1"),
    (dict(vocab_size=1.5), "vocab_size must be a positive int, got 1.5"),
    (dict(offset=0), "offset must be a positive int, got 0"),
])
def test_previous_token_task_errors(kwargs, message):
    args = dict(batch_size=2, length=5, vocab_size=4) | kwargs
    with pytest.raises(ValueError, match=message):
        previous_token_task(**args)


# ----------------------------------------------------------- the probe model


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_probe_shapes_and_max_len(positional):
    torch.manual_seed(0)
    model = PositionProbe(7, positional, d_model=16, n_heads=2, d_ff=32, max_len=12)
    tokens = torch.randint(7, (3, 12))
    assert model(tokens).shape == (3, 12, 7)
    with pytest.raises(ValueError, match="longer than max_len=12"):
        model(torch.randint(7, (1, 13)))
    with pytest.raises(ValueError, match=r"token ids in \[7, 7\], expected ids in \[0, 6\]"):
        model(torch.full((1, 3), 7))


def test_probe_bad_positional():
    with pytest.raises(ValueError, match=r"positional must be one of \('sinusoidal', 'learned'\)"):
        PositionProbe(5, "rotary")


def test_probe_is_equivariant_only_through_positions():
    """Same tokens, shifted positions: the sinusoidal probe's output changes with position."""
    torch.manual_seed(0)
    model = PositionProbe(5, "sinusoidal", d_model=16, n_heads=2, d_ff=32, max_len=8).eval()
    tokens = torch.tensor([[1, 2, 3, 4]])
    out = model(tokens)
    assert (model(tokens.flip(1)).flip(1) - out).abs().max() > 1e-3


@pytest.fixture
def one_thread():
    """Tiny matrices: a second thread only adds synchronisation (and is much slower on a
    busy machine)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def test_train_probe_learns_and_leaves_unseen_rows_alone(one_thread):
    torch.manual_seed(0)
    model = PositionProbe(6, "learned", d_model=16, n_heads=2, d_ff=32, max_len=16)
    before = model.position.table.detach().clone()
    losses = train_probe(model, train_len=8, n_steps=100, batch_size=16, min_len=4, lr=1e-2)
    assert len(losses) == 100 and losses[-1] < 0.5 * losses[0]
    table = model.position.table.detach()
    assert not torch.equal(table[:8], before[:8])  # trained rows moved
    assert torch.equal(table[8:], before[8:])  # never seen: exactly the initialization
    acc = accuracy_by_length(model, [4, 8], n_sequences=64)
    assert set(acc) == {4, 8} and min(acc.values()) > 0.6
    by_pos = accuracy_by_position(model, 16, n_sequences=64)
    assert by_pos.shape == (16,) and math.isnan(by_pos[0])
    assert by_pos[1:8].mean() > 0.6


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_probe_takes_other_positions(positional):
    torch.manual_seed(0)
    model = PositionProbe(5, positional, d_model=16, n_heads=2, d_ff=32, max_len=10).eval()
    tokens = torch.tensor([[1, 2, 3, 4]])
    # The default positions, given explicitly, change nothing.
    torch.testing.assert_close(model(tokens, torch.arange(4)), model(tokens))
    # Positions 6..9: each token gets that row of the table.
    table = model.position.pe if positional == "sinusoidal" else model.position.table
    torch.testing.assert_close(model._rows(torch.arange(6, 10), 4), table[6:10])
    assert (model(tokens, torch.arange(6, 10)) - model(tokens)).abs().max() > 1e-3
    clamped = torch.arange(4).clamp(max=2)  # the last position reuses row 2
    torch.testing.assert_close(model._rows(clamped, 4)[3], table[2])
    with pytest.raises(ValueError, match=r"positions must be a \(4,\) int tensor"):
        model(tokens, torch.arange(3))
    with pytest.raises(ValueError, match=r"positions must lie in \[0, max_len=10\), got 8 to 11"):
        model(tokens, torch.arange(8, 12))


def test_train_probe_with_random_starts_trains_the_later_rows(one_thread):
    torch.manual_seed(0)
    model = PositionProbe(6, "learned", d_model=16, n_heads=2, d_ff=32, max_len=16)
    before = model.position.table.detach().clone()
    losses = train_probe(model, train_len=6, n_steps=60, batch_size=16, min_len=4, lr=1e-2,
                         max_start=10)
    assert len(losses) == 60
    table = model.position.table.detach()
    assert not torch.equal(table[10:16], before[10:16])  # reached only by shifted sequences
    acc = accuracy_by_position(model, 6, n_sequences=32, positions=torch.arange(10, 16))
    assert acc.shape == (6,)
    with pytest.raises(ValueError, match="need 0 <= max_start <= max_len - train_len = 10"):
        train_probe(model, train_len=6, n_steps=1, max_start=11)


def test_train_probe_checks_lengths():
    model = PositionProbe(5, "sinusoidal", d_model=8, n_heads=2, d_ff=8, max_len=10)
    with pytest.raises(ValueError, match="need offset < min_len <= train_len <= max_len=10"):
        train_probe(model, train_len=11, n_steps=1)
    with pytest.raises(ValueError, match="need offset < min_len"):
        train_probe(model, train_len=4, n_steps=1, min_len=1)


# ------------------------------------------------------------- plots, explorer


def test_plot_positional_encoding():
    pe = sinusoidal_encoding(20, 8)
    ax = plot_positional_encoding(pe, position=3, dimension=5, title="t")
    np.testing.assert_allclose(ax.images[0].get_array(), pe.numpy(), rtol=1e-6)
    assert ax.get_title() == "t" and len(ax.lines) == 2


@pytest.mark.parametrize("position,dimension", [(0, 0), (0, 127), (127, 0), (127, 127)])
def test_plot_positional_view_extremes(position, dimension):
    fig = plot_positional_view(position, dimension)
    assert isinstance(fig, Figure) and len(fig.axes) >= 4
    for ax in fig.axes:
        for line in ax.lines:
            assert np.isfinite(np.asarray(line.get_ydata(), dtype=float)).all()
    (ax_sim,) = [ax for ax in fig.axes if ax.get_title().startswith(f"PE[{position}] ·")]
    similarity = ax_sim.lines[0].get_ydata()
    assert similarity[position] == pytest.approx(1.0) and similarity.max() <= 1 + 1e-12


@pytest.mark.parametrize("kwargs,message", [
    (dict(position=128, dimension=0), r"position must be in \[0, 127\], got 128"),
    (dict(position=-1, dimension=0), r"position must be in \[0, 127\], got -1"),
    (dict(position=0, dimension=128), r"dimension must be in \[0, 127\], got 128"),
    (dict(position=0, dimension=0, n_positions=0), "n_positions must be a positive int"),
])
def test_plot_positional_view_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_positional_view(**kwargs)


def test_plot_accuracy_curves():
    ax = plot_accuracy_curves({"a": ([2, 4, 8], [1.0, 0.9, 0.5])}, seen_max=4, chance=0.1,
                              title="t")
    assert ax.get_title() == "t"
    assert ax.get_legend_handles_labels()[1] == ["seen in training (≤ 4)", "a", "chance"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.0, 0.9, 0.5])
    # training lengths drawn from [4, 8]: the shading starts at 4, not at 0
    ax = plot_accuracy_curves({"a": ([2, 4, 8], [1.0, 0.9, 0.5])}, seen_max=8, seen_min=4)
    assert ax.get_legend_handles_labels()[1][0] == "seen in training (4 to 8)"
    span = ax.patches[0]
    xs = span.get_patch_transform().transform(span.get_path().vertices)[:, 0]  # data x
    assert (min(xs), max(xs)) == (3.5, 8.5)
    with pytest.raises(ValueError, match="seen_min must be in"):
        plot_accuracy_curves({"a": ([2], [1.0])}, seen_max=4, seen_min=5)


def test_positional_explorer_redraws_at_the_extremes(monkeypatch):
    pytest.importorskip("ipywidgets")
    import ipywidgets
    import matplotlib.pyplot as plt

    from aiayn.figures.positions import positional_explorer

    calls = []
    original = aiayn.figures.positions.plot_positional_view

    def recording_view(*args, **kwargs):
        fig = original(*args, **kwargs)
        ys = [np.asarray(line.get_ydata(), dtype=float) for ax in fig.axes for line in ax.lines]
        calls.append((args[:2], all(np.isfinite(y).all() for y in ys)))
        return fig

    monkeypatch.setattr(aiayn.figures.positions, "plot_positional_view", recording_view)
    box = positional_explorer(d_model=16, n_positions=40, twin=False)
    assert isinstance(box, ipywidgets.Widget)
    position, dimension = box.children[0].children
    assert (position.min, position.max, dimension.min, dimension.max) == (0, 39, 0, 15)
    for control, value in ((position, 0), (dimension, 15), (position, 39), (dimension, 0)):
        control.value = value
    assert [c[0] for c in calls] == [(10, 0), (0, 0), (0, 15), (39, 15), (39, 0)]
    assert all(finite for _, finite in calls)
    assert len(plt.get_fignums()) <= 1
    # the opening setting
    box = positional_explorer(d_model=16, n_positions=40, twin=False, position=39, dimension=15)
    assert [c.value for c in box.children[0].children] == [39, 15]
    assert calls[-1][0] == (39, 15)
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 39\], got 40"):
        positional_explorer(d_model=16, n_positions=40, twin=False, position=40)
    with pytest.raises(ValueError, match=r"dimension must be an int in \[0, 15\]"):
        positional_explorer(d_model=16, n_positions=40, twin=False, dimension=-1)
