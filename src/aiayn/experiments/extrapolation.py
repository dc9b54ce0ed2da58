"""Do sinusoids let a model run on longer sequences than it was trained on? (Section 3.5)

The paper chose sinusoids over a learned table of positions because "it may allow the
model to extrapolate to sequence lengths longer than the ones encountered during
training". Chapter 5 tests that with two small encoders that differ only in their
position signal, trained on :func:`aiayn.learning.data.previous_token_task` with lengths up to
``train_len`` and evaluated on every length up to twice that.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import EncoderLayer
from ..learning.data import IGNORE_INDEX, previous_token_task
from ..learning.training import fit
from ..positional import LearnedPositionalEncoding, PositionalEncoding
from ..utils import check_tokens

__all__ = ["PositionProbe", "train_probe", "accuracy_by_length", "accuracy_by_position"]

POSITIONAL_KINDS = ("sinusoidal", "learned")


class PositionProbe(nn.Module):
    """Token embedding + a position signal + ``n_layers`` encoder layers + a linear head.

    ``positional="sinusoidal"`` adds the fixed table of Section 3.5, ``"learned"`` a trained
    table of ``max_len`` rows (:class:`~aiayn.positional.LearnedPositionalEncoding`).
    Everything else is identical, so any gap between the two is the position signal's.
    No causal mask: each position sees the whole sequence, as in the paper's encoder.
    ``forward(tokens, positions)`` can give the tokens other positions than ``0..T-1``
    (chapter 5's exercises: clamped positions, a random start).
    """

    def __init__(
        self,
        vocab_size: int,
        positional: str = "sinusoidal",
        d_model: int = 64,
        n_heads: int = 4,
        d_ff: int = 128,
        n_layers: int = 1,
        max_len: int = 256,
    ):
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        self.vocab_size, self.positional, self.max_len = vocab_size, positional, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        if positional == "sinusoidal":
            self.position = PositionalEncoding(d_model, max_len)
        else:
            self.position = LearnedPositionalEncoding(d_model, max_len)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout=0.0) for _ in range(n_layers)
        )
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens`` ``(B, T)`` int -> logits ``(B, T, vocab_size)``.

        ``positions`` ``(T,)`` int, each in ``[0, max_len)``: the position each token is given
        (default ``0, 1, ..., T - 1``, which is what the position module adds itself)."""
        check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        if positions is None:
            x = self.position(self.embed(tokens))  # (B, T, d_model)
        else:
            x = self.embed(tokens) + self._rows(positions, tokens.shape[1])  # (T, D) broadcasts
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


    def _rows(self, positions: torch.Tensor, length: int) -> torch.Tensor:
        """The position vectors of ``positions``: ``(T,)`` int -> ``(T, d_model)``."""
        if (not isinstance(positions, torch.Tensor) or positions.shape != (length,)
                or positions.dtype.is_floating_point or positions.dtype == torch.bool):
            raise ValueError(f"positions must be a ({length},) int tensor, one per token, got "
                             f"{getattr(positions, 'shape', type(positions).__name__)}")
        if positions.min() < 0 or positions.max() >= self.max_len:
            raise ValueError(f"positions must lie in [0, max_len={self.max_len}), got "
                             f"{int(positions.min())} to {int(positions.max())}")
        table = self.position.pe if self.positional == "sinusoidal" else self.position.table
        return table[positions.to(table.device)]


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # cross_entropy wants the classes in dim 1: (B, T, V) -> (B, V, T)
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=IGNORE_INDEX)


def train_probe(
    model: PositionProbe,
    train_len: int,
    n_steps: int = 400,
    batch_size: int = 64,
    min_len: int = 2,
    offset: int = 1,
    lr: float = 3e-3,
    seed: int = 0,
    max_start: int = 0,
) -> list[float]:
    """Train on :func:`~aiayn.learning.data.previous_token_task` with lengths drawn from
    ``[min_len, train_len]``, a new length each step; returns the loss of each step.

    With ``max_start = 0`` positions ``>= train_len`` never occur, so a learned table's rows
    there get no gradient (Adam leaves a parameter with zero gradient where it is). With
    ``max_start > 0`` each step's sequences start at a position drawn from ``[0, max_start]``
    (positions ``s, s + 1, ...``), so rows up to ``max_start + train_len - 1`` are trained.
    """
    if not isinstance(train_len, int) or not offset < min_len <= train_len <= model.max_len:
        raise ValueError(
            f"need offset < min_len <= train_len <= max_len={model.max_len}, got "
            f"offset={offset}, min_len={min_len}, train_len={train_len}"
        )
    if not isinstance(max_start, int) or not 0 <= max_start <= model.max_len - train_len:
        raise ValueError(f"need 0 <= max_start <= max_len - train_len = "
                         f"{model.max_len - train_len}, got max_start={max_start!r}")
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    if max_start == 0:
        def make_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            length = int(torch.randint(min_len, train_len + 1, (1,), generator=gen))
            return previous_token_task(batch_size, length, model.vocab_size, offset, gen, device)

        return fit(model, make_batch, _loss, n_steps, lr=lr)
    return fit(_Shifted(model), _shifted_batches(model, train_len, min_len, batch_size, offset,
                                                 max_start, gen, device), _loss, n_steps, lr=lr)


class _Shifted(nn.Module):
    """The probe called on ``(tokens, positions)`` pairs, for :func:`fit`'s ``model(inputs)``."""

    def __init__(self, probe: PositionProbe):
        super().__init__()
        self.probe = probe

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.probe(*batch)


def _shifted_batches(model, train_len, min_len, batch_size, offset, max_start, gen, device):
    def make_batch(step: int):
        length = int(torch.randint(min_len, train_len + 1, (1,), generator=gen))
        start = int(torch.randint(0, max_start + 1, (1,), generator=gen))
        inputs, targets = previous_token_task(batch_size, length, model.vocab_size, offset, gen,
                                              device)
        return (inputs, torch.arange(start, start + length, device=device)), targets

    return make_batch


@torch.no_grad()
def accuracy_by_position(
    model: PositionProbe, length: int, n_sequences: int = 256, offset: int = 1, seed: int = 1,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fraction of ``n_sequences`` fresh sequences of ``length`` tokens where the model's
    top prediction is right, at each position: ``(length,)``, NaN for the first
    ``offset`` positions (nothing to predict there). ``positions``: as in
    :meth:`PositionProbe.forward`."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    inputs, targets = previous_token_task(
        n_sequences, length, model.vocab_size, offset, gen, device
    )
    model.eval()
    correct = (model(inputs, positions).argmax(-1) == targets).double().mean(0)  # (T,)
    correct[:offset] = float("nan")
    return correct.cpu()


def accuracy_by_length(
    model: PositionProbe, lengths, n_sequences: int = 256, offset: int = 1, seed: int = 1
) -> dict[int, float]:
    """Token accuracy over every predictable position, for each sequence length."""
    return {
        int(n): accuracy_by_position(model, int(n), n_sequences, offset, seed)[offset:]
        .mean()
        .item()
        for n in lengths
    }
