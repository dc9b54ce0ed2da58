"""Training: a small, readable loop the chapters share.

Later chapters add the paper's pieces (label smoothing, the warm-up schedule); the
loop itself stays this short.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

__all__ = [
    "fit",
    "label_smoothed_cross_entropy",
    "smoothed_targets",
    "smoothing_floor",
    "noam_lr",
    "noam_scheduler",
    "paper_optimizer",
    "teacher_forcing_step",
    "Seq2SeqTrainer",
    "save_checkpoint",
    "load_checkpoint",
    "average_state_dicts",
]

Batch = tuple[torch.Tensor, torch.Tensor]


def fit(
    model: nn.Module,
    make_batch: Callable[[int], Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    n_steps: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    progress: bool = False,
) -> list[float]:
    """Train ``model`` for ``n_steps`` steps and return the loss of each step.

    Args:
        model: any module; it is put in training mode.
        make_batch: ``make_batch(step) -> (inputs, targets)``, already on the model's device.
        loss_fn: ``loss_fn(model(inputs), targets) -> scalar``.
        n_steps: number of optimizer steps.
        lr: learning rate of the default optimizer, Adam.
        optimizer: use this one instead of Adam.
        progress: show a tqdm progress bar.
    """
    if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    if optimizer is None:
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = range(n_steps)
    if progress:
        from tqdm.auto import tqdm

        # mininterval: one redraw a second; a notebook receives each redraw as a message
        steps = tqdm(steps, desc="training", leave=False, mininterval=1.0)
    model.train()
    losses = []
    for step in steps:
        inputs, targets = make_batch(step)
        loss = loss_fn(model(inputs), targets)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


# ------------------------------------------ chapter 7: the paper's training recipe (Section 5)


def _allowed(n_classes: int, exclude) -> torch.Tensor:
    """Boolean ``(n_classes,)``: the ids label smoothing spreads ``epsilon`` over."""
    ids = [int(i) for i in exclude]
    if any(not 0 <= i < n_classes for i in ids):
        raise ValueError(f"exclude must hold class ids in [0, {n_classes}), got {ids}")
    allowed = torch.ones(n_classes, dtype=torch.bool)
    allowed[ids] = False
    if allowed.sum() < 2:
        raise ValueError(f"exclude must leave at least 2 of the {n_classes} classes, got {ids}")
    return allowed


def smoothed_targets(
    targets: torch.Tensor, n_classes: int, epsilon: float = 0.1, exclude: Sequence[int] = ()
) -> torch.Tensor:
    """Label smoothing (Section 5.4): ``(1 - epsilon) * one_hot + epsilon / n_classes``.

    ``targets`` ``(...)`` class ids -> ``(..., n_classes)`` distributions. By default this
    spreads ``epsilon`` uniformly over *all* classes (Szegedy et al., 2016), the convention
    of :func:`torch.nn.functional.cross_entropy` with ``label_smoothing``. ``exclude``
    (e.g. the ``<pad>`` and ``<bos>`` ids, never a target) gets nothing: ``epsilon`` is
    spread over the other ``n_classes - len(exclude)`` classes."""
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
    one_hot = torch.nn.functional.one_hot(targets, n_classes).to(torch.get_default_dtype())
    if not exclude:
        return (1 - epsilon) * one_hot + epsilon / n_classes
    allowed = _allowed(n_classes, exclude).to(one_hot)  # 1.0 where epsilon goes
    if (one_hot * (1 - allowed)).any():
        raise ValueError("a target id is in exclude: the smoothing would give it nothing")
    return (1 - epsilon) * one_hot + epsilon * allowed / allowed.sum()


def smoothing_floor(n_classes: int, epsilon: float = 0.1) -> float:
    """The smallest label-smoothed loss any prediction can reach: the entropy of the
    smoothed target, ``-(1-eps+eps/K) log(1-eps+eps/K) - (K-1) (eps/K) log(eps/K)``.
    (With ids excluded from the smoothing, ``K`` is the number of ids that remain.)

    It is reached by predicting the smoothed target itself; a perfectly confident
    prediction does *worse* (its loss grows without bound as it grows more certain)."""
    if not isinstance(n_classes, int) or n_classes < 2:
        raise ValueError(f"n_classes must be an int >= 2, got {n_classes!r}")
    if not 0.0 < epsilon < 1.0:
        return 0.0 if epsilon == 0.0 else float("nan")
    top, rest = 1 - epsilon + epsilon / n_classes, epsilon / n_classes
    return -top * math.log(top) - (n_classes - 1) * rest * math.log(rest)


def label_smoothed_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    epsilon: float = 0.1,
    ignore_index: int = -100,
    exclude: Sequence[int] = (),
) -> torch.Tensor:
    """Mean cross-entropy between ``softmax(logits)`` and the smoothed targets.

    ``logits`` ``(..., K)``, ``targets`` ``(...)``; positions whose target is
    ``ignore_index`` (padding) count for nothing. Equals
    ``F.cross_entropy(logits, targets, ignore_index=..., label_smoothing=epsilon)``,
    written out: ``(1 - eps) * NLL + eps * mean_k(-log p_k)``. With ``exclude`` the mean
    runs over the other ids only (:func:`smoothed_targets`)."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits (..., K) and targets (...) must agree, got {tuple(logits.shape)} "
            f"and {tuple(targets.shape)}"
        )
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
    keep = targets != ignore_index
    if not keep.any():
        raise ValueError("every target is ignore_index: nothing to compute a loss on")
    log_p = torch.log_softmax(logits[keep], dim=-1)  # (N, K) over the kept positions
    nll = -log_p.gather(-1, targets[keep][:, None])[:, 0]  # -log p(correct)
    if exclude:
        allowed = _allowed(logits.shape[-1], exclude).to(logits.device)
        if (~allowed[targets[keep]]).any():
            raise ValueError("a target id is in exclude: the smoothing would give it nothing")
        log_p = log_p[:, allowed]  # (N, K - len(exclude))
    uniform = -log_p.mean(dim=-1)  # cross-entropy with the uniform distribution
    return ((1 - epsilon) * nll + epsilon * uniform).mean()


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """Eq. 3: ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, ``step >= 1``.

    Linear warm-up for ``warmup`` steps, then decay with the inverse square root of the
    step; the peak, at ``step = warmup``, is ``factor * (d_model * warmup)^-0.5``."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"step must be an int >= 1 (the paper counts from 1), got {step!r}")
    if not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"warmup must be a positive int, got {warmup!r}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def paper_optimizer(model: nn.Module, lr: float = 1.0) -> torch.optim.Adam:
    """Adam with the paper's beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9 (Section 5.3).

    ``lr = 1`` so that :func:`noam_scheduler` sets the whole learning rate."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def noam_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """A :class:`~torch.optim.lr_scheduler.LambdaLR` following :func:`noam_lr`.

    LambdaLR multiplies the optimizer's ``lr`` (use 1.0) by the factor and counts from
    0, so optimizer step ``s`` (0-based) uses ``noam_lr(s + 1)``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: noam_lr(s + 1, d_model, warmup, factor)
    )


def teacher_forcing_step(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, epsilon: float = 0.1, pad_id: int = 0
) -> tuple[torch.Tensor, int, int]:
    """One parallel pass over every target position (teacher forcing).

    ``tgt`` is ``<bos> y_1 .. y_n <eos>`` (padded): the decoder reads ``tgt[:, :-1]``
    (the targets shifted right) and predicts ``tgt[:, 1:]`` at every position at once.
    Returns ``(loss, n_correct, n_tokens)``, counting non-padding positions."""
    decoder_in, expected = tgt[:, :-1], tgt[:, 1:]  # (B, T) each
    logits = model(src, decoder_in)  # (B, T, V): all T positions in one forward pass
    loss = label_smoothed_cross_entropy(logits, expected, epsilon, ignore_index=pad_id)
    keep = expected != pad_id
    correct = ((logits.argmax(-1) == expected) & keep).sum().item()
    return loss, int(correct), int(keep.sum().item())


class Seq2SeqTrainer:
    """The paper's recipe for an encoder-decoder: teacher forcing, label smoothing,
    Adam (0.9, 0.98, 1e-9) and the warm-up schedule, with a history and checkpoints.

    ``batch_fn(step) -> (src, tgt)`` must depend only on ``step`` so that a resumed run
    sees the same batches as an uninterrupted one."""

    def __init__(
        self,
        model: nn.Module,
        warmup: int = 4000,
        factor: float = 1.0,
        epsilon: float = 0.1,
        clip_norm: float | None = None,
    ):
        self.model, self.epsilon, self.clip_norm = model, epsilon, clip_norm
        self.warmup, self.factor = warmup, factor
        d_model = model.config.d_model
        self.optimizer = paper_optimizer(model)
        self.scheduler = noam_scheduler(self.optimizer, d_model, warmup, factor)
        self.step = 0
        self.history: dict[str, list[float]] = {"loss": [], "accuracy": [], "lr": []}

    def train(
        self,
        batch_fn: Callable[[int], Batch],
        n_steps: int,
        progress: bool = False,
        time_limit: float | None = None,
    ) -> dict[str, list[float]]:
        """Run ``n_steps`` more steps (or until ``time_limit`` seconds) and return the history.

        ``history["accuracy"]`` is the per-step token accuracy under teacher forcing."""
        import time

        if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
            raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
        steps = range(self.step, self.step + n_steps)
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc="training", leave=False, mininterval=1.0)
        pad_id = self.model.config.pad_id
        start = time.perf_counter()
        self.model.train()
        for step in steps:
            src, tgt = batch_fn(step)
            loss, correct, total = teacher_forcing_step(self.model, src, tgt, self.epsilon, pad_id)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {step}")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip_norm is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
            self.history["lr"].append(self.optimizer.param_groups[0]["lr"])
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
            self.history["loss"].append(loss.item())
            self.history["accuracy"].append(correct / total)
            if progress:
                steps.set_postfix(loss=f"{loss.item():.3f}", acc=f"{correct / total:.3f}", refresh=False)
            if time_limit is not None and time.perf_counter() - start > time_limit:
                break
        self.model.eval()
        return self.history

    def save(self, path: str | Path) -> None:
        """Save weights, config, optimizer, schedule, step, history and RNG state."""
        save_checkpoint(path, self.model, trainer=self)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> Seq2SeqTrainer:
        """Rebuild a trainer from :meth:`save`; :meth:`train` then continues where it stopped."""
        model, state = load_checkpoint(path, map_location)
        extra = state["trainer"]
        trainer = cls(model, extra["warmup"], extra["factor"], extra["epsilon"], extra["clip_norm"])
        trainer.optimizer.load_state_dict(extra["optimizer"])
        trainer.scheduler.load_state_dict(extra["scheduler"])
        trainer.step, trainer.history = extra["step"], extra["history"]
        torch.set_rng_state(extra["rng_state"])
        return trainer


def save_checkpoint(path: str | Path, model: nn.Module, trainer: Seq2SeqTrainer | None = None) -> None:
    """Save a :class:`~aiayn.model.Transformer`'s config and weights (and a trainer's state)."""
    from dataclasses import asdict

    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be an aiayn Transformer (it needs a .config)")
    state = {"config": asdict(config), "model": model.state_dict()}
    if trainer is not None:
        state["trainer"] = {
            "warmup": trainer.warmup, "factor": trainer.factor, "epsilon": trainer.epsilon,
            "clip_norm": trainer.clip_norm, "step": trainer.step, "history": trainer.history,
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(),
            "rng_state": torch.get_rng_state(),
        }
    torch.save(state, Path(path))


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[nn.Module, dict]:
    """Rebuild the model saved by :func:`save_checkpoint`; returns ``(model, state)``.

    The model is in eval mode, on ``map_location``."""
    from ..model import Transformer, TransformerConfig

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location=map_location, weights_only=False)
    model = Transformer(TransformerConfig(**state["config"])).to(map_location)
    model.load_state_dict(state["model"])
    return model.eval(), state


def average_state_dicts(states: list[dict]) -> dict:
    """The element-wise mean of several state dicts of one model (Section 6.1: the
    paper's base models average the last 5 checkpoints). Non-float entries are taken
    from the last state."""
    if not states:
        raise ValueError("states must hold at least one state_dict")
    keys = states[-1].keys()
    if any(s.keys() != keys for s in states):
        raise ValueError("every state_dict must have the same keys")
    return {
        k: torch.stack([s[k] for s in states]).mean(dim=0)
        if states[-1][k].is_floating_point() else states[-1][k]
        for k in keys
    }

