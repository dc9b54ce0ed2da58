"""Chapter 6's measurements: LayerNorm written out and set
against BatchNorm when padding is added, and gradient norms per layer (Post-LN against
Pre-LN).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ..layers import DecoderLayer, EncoderLayer
from ..model import Transformer, TransformerConfig

__all__ = [
    "layer_norm",
    "normalize",
    "padding_effect",
    "layer_gradient_norms",
    "cross_sample_effect",
    "masked_batch_norm",
    "VARIANTS",
    "stack_variant",
    "token_spread",
    "decoder_gradient_flow",
    "train_warmup_run",
]


def layer_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm without its learned scale and shift: each token ``(.., d_model)`` minus
    its own mean, divided by its own standard deviation (biased variance, as
    ``torch.nn.LayerNorm``). Nothing is shared between tokens."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor (.., d_model)")
    mean = x.mean(dim=-1, keepdim=True)  # (.., 1): one mean per token
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # (.., 1): one variance per token
    return (x - mean) / torch.sqrt(var + eps)


def normalize(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Apply ``norm`` to ``x`` ``(B, T, d)``: a LayerNorm as it is, a BatchNorm1d over
    every position of the batch (torch wants the features in dimension 1)."""
    if isinstance(norm, nn.BatchNorm1d):
        return norm(x.transpose(1, 2)).transpose(1, 2)  # statistics over B * T positions
    if isinstance(norm, nn.LayerNorm):
        return norm(x)  # statistics over d, per position
    raise TypeError(f"norm must be nn.LayerNorm or nn.BatchNorm1d, got {type(norm).__name__}")


def padding_effect(norm: nn.Module, x: torch.Tensor, n_pad: int, pad_value: float = 0.0) -> float:
    """Largest change of the real tokens' outputs when ``n_pad`` padding positions
    (vectors of ``pad_value``) are appended to every sequence of ``x`` ``(B, T, d)``.

    ``norm`` is used in training mode, where BatchNorm computes its statistics from the
    batch it is given; its running statistics are restored afterwards."""
    if not isinstance(n_pad, int) or isinstance(n_pad, bool) or n_pad < 0:
        raise ValueError(f"n_pad must be a non-negative int, got {n_pad!r}")
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, length, d), got shape {tuple(x.shape)}")
    saved = {k: v.clone() for k, v in norm.state_dict().items()}
    was_training = norm.training
    norm.train()
    with torch.no_grad():
        alone = normalize(norm, x)
        pads = torch.full((x.shape[0], n_pad, x.shape[2]), pad_value, dtype=x.dtype)
        padded = normalize(norm, torch.cat([x, pads.to(x.device)], dim=1))[:, : x.shape[1]]
    norm.load_state_dict(saved)
    norm.train(was_training)
    return (padded - alone).abs().max().item()


def layer_gradient_norms(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, epsilon: float = 0.1
) -> dict[str, list[float]]:
    """Gradient norm of each encoder and decoder layer's parameters for one teacher-forced
    batch (``tgt`` = ``<bos>`` .. ``<eos>``) under the label-smoothed loss.

    Returns ``{"encoder": [layer 1, ..], "decoder": [layer 1, ..]}``; the model's
    gradients are cleared before and after."""
    from ..learning.training import teacher_forcing_step

    model.zero_grad(set_to_none=True)
    loss, _, _ = teacher_forcing_step(model, src, tgt, epsilon, model.config.pad_id)
    loss.backward()
    norms = {}
    for stack in ("encoder", "decoder"):
        norms[stack] = [
            torch.sqrt(sum(p.grad.square().sum() for p in layer.parameters()
                           if p.grad is not None)).item()
            for layer in getattr(model, stack).layers
        ]
    model.zero_grad(set_to_none=True)
    return norms


def cross_sample_effect(norm, x: torch.Tensor, others: torch.Tensor) -> float:
    """Largest change of the first sequence's outputs when the rest of the batch ``x``
    ``(B, T, d)`` is replaced by ``others`` ``(B - 1, T, d)``.

    ``norm`` is an ``nn.LayerNorm`` or ``nn.BatchNorm1d`` (used in training mode, its
    state restored afterwards) or any function ``(B, T, d) -> (B, T, d)``."""
    if x.dim() != 3 or others.shape != (x.shape[0] - 1, *x.shape[1:]):
        raise ValueError(f"others must be (B - 1, T, d) for x {tuple(x.shape)}, "
                         f"got {tuple(others.shape)}")
    apply = norm
    if isinstance(norm, nn.Module):
        saved, was_training = {k: v.clone() for k, v in norm.state_dict().items()}, norm.training
        norm.train()

        def apply(batch):
            return normalize(norm, batch)
    with torch.no_grad():
        first = apply(x)[0]
        first_other = apply(torch.cat([x[:1], others]))[0]
    if isinstance(norm, nn.Module):
        norm.load_state_dict(saved)
        norm.train(was_training)
    return (first - first_other).abs().max().item()


def masked_batch_norm(x: torch.Tensor, keep: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm's statistics over the real tokens only: each feature of ``x`` ``(B, T, d)``
    minus its mean over the positions where ``keep`` ``(B, T)`` is True, divided by their
    standard deviation. Padding no longer moves the real tokens; the other sequences
    of the batch still do."""
    if keep.shape != x.shape[:2] or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a bool tensor of shape {tuple(x.shape[:2])}, "
                         f"got {keep.dtype} {tuple(keep.shape)}")
    real = x[keep]  # (n_real, d): every real token of the batch
    mean, var = real.mean(dim=0), real.var(dim=0, unbiased=False)  # (d,) per feature
    return (x - mean) / torch.sqrt(var + eps)


#: The four stacks compared at initialisation by :func:`stack_variant`.
VARIANTS = ("Post-LN", "Pre-LN", "no LayerNorm", "no residual")


class _NoResidualEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(self._self_attention(x, mask))  # LN(Sublayer(x)): no "x +"
        return self.norm2(self._feed_forward(x))


class _NoResidualDecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(self._self_attention(x, tgt_mask))
        x = self.norm2(self._cross_attention(x, memory, memory_mask))
        return self.norm3(self._feed_forward(x))


def stack_variant(config: TransformerConfig, variant: str, seed: int = 0) -> Transformer:
    """A freshly initialised ``Transformer(config)`` (seeded) whose layers are one of
    :data:`VARIANTS`: ``"Post-LN"`` ``LN(x + F(x))``, ``"Pre-LN"`` ``x + F(LN(x))``,
    ``"no LayerNorm"`` ``x + F(x)`` and ``"no residual"`` ``LN(F(x))``. The same
    weights in all four, for a given seed and config."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    torch.manual_seed(seed)
    model = Transformer(replace(config, norm_first=variant == "Pre-LN"))
    for stack, plain in ((model.encoder, _NoResidualEncoderLayer),
                         (model.decoder, _NoResidualDecoderLayer)):
        for layer in stack.layers:
            if variant == "no LayerNorm":
                for name in ("norm1", "norm2", "norm3"):
                    if hasattr(layer, name):
                        setattr(layer, name, nn.Identity())
            elif variant == "no residual":
                layer.__class__ = plain  # same parameters, forward without the "x +"
    return model


def token_spread(x: torch.Tensor, keep: torch.Tensor) -> float:
    """How distinct the tokens of each sequence are: 1 minus the mean cosine similarity
    of every pair of real tokens (``keep`` ``(B, T)``) of ``x`` ``(B, T, d)``, averaged
    over the sequences. 0 means every token of a sequence points the same way."""
    if keep.shape != x.shape[:2]:
        raise ValueError(f"keep must have shape {tuple(x.shape[:2])}, got {tuple(keep.shape)}")
    unit = nn.functional.normalize(x.double(), dim=-1)
    spreads = []
    for u, k in zip(unit, keep, strict=True):
        u = u[k]  # (n, d): the real tokens
        n = u.shape[0]
        if n > 1:
            cos = u @ u.T  # (n, n)
            spreads.append(1 - (cos.sum() - cos.diagonal().sum()).item() / (n * (n - 1)))
    return sum(spreads) / len(spreads)


def decoder_gradient_flow(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                          epsilon: float = 0.1) -> dict[str, list[float]]:
    """Where the decoder's gradient shrinks, for one teacher-forced batch.

    Returns ``"layer_input"``: the gradient norm at the input of each decoder layer
    (layer 1 first); ``"norm_gain"``: for each LayerNorm of the decoder's layers, in
    forward order, the gradient norm at its input divided by that at its output;
    ``"inv_scale"``: for the same LayerNorms, 1 / (standard deviation of the sum it
    normalises), averaged over positions. Gradients are cleared afterwards."""
    from ..learning.training import teacher_forcing_step

    layer_inputs, norm_io, handles = [], [], []

    def keep_input(module, args, output):
        args[0].retain_grad()
        layer_inputs.append(args[0])

    def keep_both(module, args, output):
        args[0].retain_grad()
        output.retain_grad()
        norm_io.append((args[0], output))

    for layer in model.decoder.layers:
        handles.append(layer.register_forward_hook(keep_input))
        handles += [m.register_forward_hook(keep_both)
                    for m in layer.modules() if isinstance(m, nn.LayerNorm)]
    model.zero_grad(set_to_none=True)
    try:
        loss, _, _ = teacher_forcing_step(model, src, tgt, epsilon, model.config.pad_id)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    model.zero_grad(set_to_none=True)
    return {
        "layer_input": [x.grad.norm().item() for x in layer_inputs],
        "norm_gain": [x.grad.norm().item() / y.grad.norm().item() for x, y in norm_io],
        "inv_scale": [(1 / x.detach().std(dim=-1, unbiased=False)).mean().item()
                      for x, _ in norm_io],
    }


def train_warmup_run(
    config: TransformerConfig, tokenizer, n_steps: int, warmup: int = 300, ramp: bool = True,
    batch: int = 64, seed: int = 0, factor: float = 1.0, device=None,
) -> tuple[Transformer, dict[str, list[float]]]:
    """:func:`aiayn.learning.recipes.train_date_model` with the schedule's ``factor`` (Eq. 3):
    the peak rate is ``factor * (d_model * warmup) ** -0.5``; ``ramp=False`` starts at
    it (:func:`aiayn.learning.recipes.no_ramp_lr`). Only the ``n_steps * batch`` training pairs
    used are generated: with ``factor = 1`` the run is ``train_date_model``'s, batch for
    batch. A run whose loss becomes NaN stops there (``history["diverged"]``)."""
    from ..learning.recipes import date_batch_fn, no_ramp_lr
    from ..learning.training import Seq2SeqTrainer

    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    torch.manual_seed(seed)
    model = Transformer(config).to(device or "cpu")
    trainer = Seq2SeqTrainer(model, warmup=warmup, factor=factor)
    if not ramp:
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
            trainer.optimizer, lambda s: no_ramp_lr(s + 1, config.d_model, warmup, factor))
    batch_fn = date_batch_fn(tokenizer, batch, n_pairs=n_steps * batch, seed=seed, device=device)
    try:
        trainer.train(batch_fn, n_steps)
    except FloatingPointError:
        trainer.history["diverged"] = [trainer.step]
        model.eval()
    return model, trainer.history
