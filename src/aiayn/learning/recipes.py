"""Chapter 7's date-translation recipe as functions, for the chapters and benchmarks
that reuse it: chapter 6 trains Post-LN and Pre-LN models with it, and the benchmarks
time it to 99% exact match.

One place for the configuration, the batches, the schedule and the metric means the
experiments of different pages are the same experiment.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ..model import Transformer, TransformerConfig
from .data import DATE_FORMATS, CharTokenizer, date_batch, date_pairs, date_split, format_date
from .training import Seq2SeqTrainer, noam_lr

__all__ = [
    "date_config",
    "date_test_pairs",
    "date_batch_fn",
    "exact_match",
    "no_ramp_lr",
    "train_date_model",
    "train_to_accuracy",
]

#: Chapter 7's training set size, batch size and warm-up steps.
TRAIN_PAIRS, BATCH, WARMUP = 200_000, 128, 300


def date_config(tokenizer: CharTokenizer, **overrides) -> TransformerConfig:
    """Chapter 7's model: 2 + 2 layers of width 64, 4 heads, d_ff = 256, no dropout.

    ``overrides`` change any field, e.g. ``norm_first=True`` or ``n_layers=6``."""
    fields = dict(src_vocab=len(tokenizer), tgt_vocab=len(tokenizer), d_model=64, n_heads=4,
                  n_layers=2, d_ff=256, dropout=0.0, max_len=64, pad_id=tokenizer.pad_id)
    fields.update(overrides)
    return TransformerConfig(**fields)


def date_test_pairs() -> list[tuple[str, str]]:
    """One pair per held-out date, the written forms taken in turn (chapter 7's test set)."""
    return [(format_date(d, i % len(DATE_FORMATS)), d.isoformat())
            for i, d in enumerate(date_split("test"))]


def date_batch_fn(
    tokenizer: CharTokenizer, batch: int = BATCH, n_pairs: int = TRAIN_PAIRS, seed: int = 0,
    device: torch.device | str | None = None,
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """``batch_fn(step) -> (src, tgt)``: consecutive slices of ``n_pairs`` training pairs.

    The batch depends on ``step`` only, so a resumed run sees the batches an
    uninterrupted one would."""
    pairs = date_pairs(n_pairs, "train", seed=seed)

    def batch_fn(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = step * batch % len(pairs)
        return date_batch(pairs[start : start + batch], tokenizer, device)

    return batch_fn


@torch.no_grad()
def exact_match(
    model: Transformer, tokenizer: CharTokenizer, pairs: list[tuple[str, str]],
    max_len: int = 12, batch: int = 512,
) -> float:
    """Share of ``pairs`` whose greedy translation equals the expected text exactly."""
    from .decode import greedy_decode

    if not pairs:
        raise ValueError("pairs must hold at least one (source, target) pair")
    device = next(model.parameters()).device
    right = 0
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        src, _ = date_batch(chunk, tokenizer, device)
        out = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id, max_len, True)
        right += sum(tokenizer.decode(row) == want for row, (_, want) in zip(out.tokens, chunk, strict=True))
    return right / len(pairs)


def no_ramp_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The paper's schedule with its warm-up ramp removed: the peak rate from step 1,
    then the same inverse-square-root decay (equal to :func:`~aiayn.learning.training.noam_lr` from
    step ``warmup`` on)."""
    return noam_lr(max(step, warmup), d_model, warmup, factor)


def train_date_model(
    config: TransformerConfig,
    tokenizer: CharTokenizer,
    n_steps: int,
    warmup: int = WARMUP,
    ramp: bool = True,
    batch: int = BATCH,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool = False,
    stop_on_nan: bool = True,
) -> tuple[Transformer, dict[str, list[float]]]:
    """Train a fresh model of ``config`` on the date task with chapter 7's recipe.

    ``ramp=False`` swaps the warm-up for :func:`no_ramp_lr`. A run whose loss becomes
    NaN or infinite stops there (``history["diverged"] == [step]``) instead of raising,
    when ``stop_on_nan``: divergence is one of the outcomes being measured.
    Returns ``(model, history)`` with the per-step ``loss``, ``accuracy`` and ``lr``."""
    torch.manual_seed(seed)
    model = Transformer(config).to(device or "cpu")
    trainer = Seq2SeqTrainer(model, warmup=warmup)
    if not ramp:
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
            trainer.optimizer, lambda s: no_ramp_lr(s + 1, config.d_model, warmup))
    batch_fn = date_batch_fn(tokenizer, batch, seed=seed, device=device)
    try:
        trainer.train(batch_fn, n_steps, progress=progress)
    except FloatingPointError:
        if not stop_on_nan:
            raise
        trainer.history["diverged"] = [trainer.step]
        model.eval()
    return model, trainer.history


def train_to_accuracy(
    target: float = 0.99, eval_every: int = 100, max_steps: int = 5000,
    device: torch.device | str | None = None, seed: int = 0, threads: int | None = None,
) -> dict[str, float]:
    """Train chapter 7's model until greedy exact match on the held-out dates reaches
    ``target`` (checked every ``eval_every`` steps with the current weights, no
    averaging), or ``max_steps``. Returns ``seconds`` (training only, evaluation
    excluded), ``steps`` and the ``exact`` match reached."""
    from .data import date_tokenizer

    if not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target}")
    tokenizer = date_tokenizer()
    test_pairs = date_test_pairs()
    torch.manual_seed(seed)
    model = Transformer(date_config(tokenizer)).to(device or "cpu")
    trainer = Seq2SeqTrainer(model, warmup=WARMUP)
    batch_fn = date_batch_fn(tokenizer, seed=seed, device=device)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    seconds, exact = 0.0, 0.0
    try:
        while trainer.step < max_steps:
            start = time.perf_counter()
            trainer.train(batch_fn, min(eval_every, max_steps - trainer.step))
            seconds += time.perf_counter() - start
            exact = exact_match(model, tokenizer, test_pairs)
            if exact >= target:
                break
    finally:
        torch.set_num_threads(saved_threads)
    return {"seconds": seconds, "steps": trainer.step, "exact": exact}
