"""Why the scores are divided by sqrt(d_k) (Section 3.2.1 and footnote 4 of the paper).

The paper's argument in three measurable pieces:

1. If the components of ``q`` and ``k`` are independent with mean 0 and variance 1,
   ``q . k`` has mean 0 and variance ``d_k`` (:func:`dot_product_samples`,
   :func:`dot_product_moments`, :func:`variance_with_se`).
2. Large scores saturate the softmax: its Jacobian ``diag(p) - p p^T`` goes to zero,
   and with it the gradient that reaches the queries and keys
   (:func:`softmax_jacobian`, :func:`softmax_stats`, :func:`attention_score_rows`).
3. What that does to learning: :class:`AttentionReader`, a one-layer attention
   classifier whose scaling can be switched off.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import scaled_dot_product_attention
from ..utils import check_tensor

__all__ = [
    "dot_product_samples",
    "dot_product_moments",
    "variance_with_se",
    "softmax_jacobian",
    "softmax_stats",
    "attention_score_rows",
    "AttentionReader",
    "attention_gradient_norms",
]

# Draw at most this many numbers at once, so d_k = 1024 never needs a large buffer.
_CHUNK_NUMBERS = 1 << 21


def _check_positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_dependence(mean: float, qk_corr: float, within_corr: float) -> None:
    if not math.isfinite(mean):
        raise ValueError(f"mean must be a finite number, got {mean}")
    if not -1.0 <= qk_corr <= 1.0:
        raise ValueError(f"qk_corr must be in [-1, 1], got {qk_corr}")
    if not 0.0 <= within_corr < 1.0:
        raise ValueError(f"within_corr must be in [0, 1), got {within_corr}")


def _components(
    shape: tuple[int, ...], within_corr: float, generator: torch.Generator | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Standard normal vectors along the last dim, each pair of components correlated
    ``within_corr`` (a common factor shared by all components of one vector)."""
    noise = torch.randn(shape, generator=generator, dtype=dtype)
    if within_corr == 0.0:
        return noise
    common = torch.randn((*shape[:-1], 1), generator=generator, dtype=dtype)
    return math.sqrt(within_corr) * common + math.sqrt(1.0 - within_corr) * noise


def dot_product_samples(
    d_k: int,
    n_samples: int,
    generator: torch.Generator | None = None,
    *,
    mean: float = 0.0,
    qk_corr: float = 0.0,
    within_corr: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``n_samples`` draws of the unscaled score ``q . k`` of two random ``d_k``-vectors.

    With the defaults, every component of ``q`` and ``k`` is an independent standard
    normal: the assumption of the paper's footnote 4. The keyword arguments break it:

    * ``mean``: every component has this mean (variance still 1);
    * ``qk_corr``: ``q_i`` and ``k_i`` are correlated (as when ``W^Q`` resembles ``W^K``);
    * ``within_corr``: the components of one vector are correlated with each other.

    Returns a ``(n_samples,)`` tensor; :func:`dot_product_moments` gives its exact
    mean and variance.
    """
    _check_positive_int("d_k", d_k)
    _check_positive_int("n_samples", n_samples)
    _check_dependence(mean, qk_corr, within_corr)
    rows = max(1, _CHUNK_NUMBERS // d_k)
    out = []
    for start in range(0, n_samples, rows):
        shape = (min(rows, n_samples - start), d_k)
        q = _components(shape, within_corr, generator, dtype)
        fresh = _components(shape, within_corr, generator, dtype)
        k = qk_corr * q + math.sqrt(1.0 - qk_corr**2) * fresh  # corr(q_i, k_i) = qk_corr
        out.append(((q + mean) * (k + mean)).sum(-1))  # (rows, d_k) -> (rows,)
    return torch.cat(out)


def dot_product_moments(
    d_k: int, *, mean: float = 0.0, qk_corr: float = 0.0, within_corr: float = 0.0
) -> tuple[float, float]:
    """Exact ``(E[q . k], Var[q . k])`` for the vectors of :func:`dot_product_samples`.

    Writing ``C`` for the covariance of one vector (1 on the diagonal, ``within_corr``
    off it), ``rho = qk_corr`` and ``m = mean``, Gaussian moment algebra gives

    * ``E = d_k (m^2 + rho)``,
    * ``Var = (1 + rho^2) tr(C^2) + 2 m^2 (1 + rho) 1^T C 1``.

    With the paper's assumption (``m = rho = within_corr = 0``, so ``C = I``) this is
    ``(0, d_k)``: footnote 4.
    """
    _check_positive_int("d_k", d_k)
    _check_dependence(mean, qk_corr, within_corr)
    c, rho, m = within_corr, qk_corr, mean
    trace_c2 = d_k + d_k * (d_k - 1) * c**2
    sum_c = d_k + d_k * (d_k - 1) * c
    expected = d_k * (m**2 + rho)
    variance = (1 + rho**2) * trace_c2 + 2 * m**2 * (1 + rho) * sum_c
    return float(expected), float(variance)


def variance_with_se(x: torch.Tensor) -> tuple[float, float]:
    """Unbiased sample variance of a 1-D sample and its standard error.

    The standard error of ``s^2`` from ``n`` independent draws is
    ``sqrt((m_4 - s^4 (n - 3) / (n - 1)) / n)``, with ``m_4`` the fourth central
    moment; for a normal sample this is about ``s^2 sqrt(2 / n)``.
    """
    check_tensor("x", x, ndim=1)
    n = x.shape[0]
    if n < 4:
        raise ValueError(f"x must hold at least 4 samples for a standard error, got {n}")
    x = x.double()
    centred = x - x.mean()
    variance = centred.square().sum() / (n - 1)
    m4 = centred.pow(4).mean()
    se = torch.sqrt((m4 - variance.square() * (n - 3) / (n - 1)).clamp_min(0) / n)
    return variance.item(), se.item()


def softmax_jacobian(z: torch.Tensor) -> torch.Tensor:
    """The exact Jacobian of ``p = softmax(z)`` along the last dim: ``diag(p) - p p^T``.

    ``J[i, j] = dp_i / dz_j = p_i (delta_ij - p_j)``. Input ``(..., n)``, output
    ``(..., n, n)``. When ``p`` is one-hot (a saturated softmax) every entry is 0, so
    no gradient flows back to the scores.
    """
    check_tensor("z", z, min_dim=1)
    p = torch.softmax(z, dim=-1)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., n, n)


def softmax_stats(scores: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per row of ``scores`` ``(..., n)``: how saturated its softmax is.

    Returns a dict of ``(...)`` tensors:

    * ``max_weight``: the largest weight (1/n uniform, 1 one-hot);
    * ``entropy``: in nats (``log n`` uniform, 0 one-hot);
    * ``jacobian_norm``: the Frobenius norm of :func:`softmax_jacobian`, the size of
      the gradient the softmax passes back (``sqrt(n - 1) / n`` uniform, 0 one-hot).
    """
    check_tensor("scores", scores, min_dim=1)
    p = torch.softmax(scores, dim=-1)
    entropy = -torch.special.xlogy(p, p).sum(-1)  # 0 log 0 = 0
    return {
        "max_weight": p.amax(-1),
        "entropy": entropy,
        "jacobian_norm": torch.linalg.matrix_norm(softmax_jacobian(scores)),
    }


def attention_score_rows(
    d_k: int,
    n_rows: int,
    n_keys: int,
    generator: torch.Generator | None = None,
    *,
    scaled: bool = True,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Score rows ``q . k_j`` (divided by ``sqrt(d_k)`` when ``scaled``) for random vectors.

    Each row has its own query and ``n_keys`` keys, all with independent standard
    normal components (the footnote's assumption). Returns ``(n_rows, n_keys)``.
    """
    for name, value in (("d_k", d_k), ("n_rows", n_rows), ("n_keys", n_keys)):
        _check_positive_int(name, value)
    rows = max(1, _CHUNK_NUMBERS // (n_keys * d_k))
    out = []
    for start in range(0, n_rows, rows):
        size = min(rows, n_rows - start)
        q = torch.randn(size, 1, d_k, generator=generator, dtype=dtype)
        k = torch.randn(size, n_keys, d_k, generator=generator, dtype=dtype)
        out.append((q @ k.transpose(-2, -1))[:, 0])  # (size, 1, n_keys) -> (size, n_keys)
    scores = torch.cat(out)
    return scores / math.sqrt(d_k) if scaled else scores


class AttentionReader(nn.Module):
    """One attention layer that reads a token sequence with a single learned query.

    A learned "reader" vector is projected to a query, the tokens to keys and values
    (``W^Q``, ``W^K``, ``W^V`` of Section 3.2.2, one head), and the attention output
    is mapped to class logits. ``scaled`` switches the ``1/sqrt(d_k)`` of Eq. 1 on or
    off; nothing else differs.

    The projections are initialised with variance ``1 / d_model`` and the embeddings
    and reader with variance 1, so at initialisation the components of ``q`` and
    ``k`` have mean 0 and variance close to 1: the assumption of footnote 4.
    """

    def __init__(
        self, vocab_size: int, d_model: int, d_k: int, n_classes: int, scaled: bool = True
    ):
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size), ("d_model", d_model), ("d_k", d_k),
            ("n_classes", n_classes),
        ):
            _check_positive_int(name, value)
        self.d_k, self.scaled = d_k, scaled
        self.embed = nn.Embedding(vocab_size, d_model)  # N(0, 1) entries
        self.reader = nn.Parameter(torch.randn(d_model))
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.classify = nn.Linear(d_model, n_classes)
        for linear in (self.w_q, self.w_k, self.w_v):
            nn.init.normal_(linear.weight, std=d_model**-0.5)

    @property
    def scale(self) -> float:
        """The factor applied to the scores, ``1/sqrt(d_k)`` (or 1 when unscaled)."""
        return 1.0 / math.sqrt(self.d_k) if self.scaled else 1.0

    def forward(
        self, tokens: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` ``(B, T)`` -> logits ``(B, n_classes)`` (and weights ``(B, T)``)."""
        x = self.embed(tokens)  # (B, T) -> (B, T, d_model)
        q = self.w_q(self.reader).expand(x.shape[0], 1, self.d_k)  # (B, 1, d_k)
        out, weights = scaled_dot_product_attention(
            q, self.w_k(x), self.w_v(x), scale=self.scale
        )  # out (B, 1, d_model), weights (B, 1, T)
        logits = self.classify(out[:, 0])  # (B, n_classes)
        return (logits, weights[:, 0]) if need_weights else logits

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, scaled={self.scaled}"


def attention_gradient_norms(
    model: AttentionReader, tokens: torch.Tensor, targets: torch.Tensor
) -> dict[str, float]:
    """Norms of the cross-entropy gradient on ``W^Q``, ``W^K`` and ``W^V`` for one batch.

    The query and key projections get their gradient only through the softmax, so a
    saturated softmax starves them; ``W^V`` does not pass through it. The model's
    existing gradients are left untouched.
    """
    if not isinstance(model, AttentionReader):
        raise TypeError(f"model must be an AttentionReader, got {type(model).__name__}")
    params = {"w_q": model.w_q.weight, "w_k": model.w_k.weight, "w_v": model.w_v.weight}
    loss = F.cross_entropy(model(tokens), targets)
    grads = torch.autograd.grad(loss, list(params.values()))
    return {name: g.norm().item() for name, g in zip(params, grads, strict=True)}
