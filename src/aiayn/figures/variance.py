"""Chapter 3's figures and explorer: the variance of dot products, the
softmax's saturation as d_k grows, and training with and without the scaling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_dot_product_variance",
    "plot_scaling_view",
    "plot_scaling_training",
    "scaling_explorer",
    "scaling_twin",
    "SCALING_D_KS",
    "scaling_caption",
]

#: The ``d_k`` values of chapter 3's explorer, live and in the HTML book's twin alike.
SCALING_D_KS = tuple(2**i for i in range(11))


def _check_opening(d_k, scaled) -> None:
    """The explorer's opening setting must be one of its options."""
    if isinstance(d_k, bool) or d_k not in SCALING_D_KS:
        raise ValueError(f"d_k must be one of {list(SCALING_D_KS)}, got {d_k!r}")
    if not isinstance(scaled, bool):
        raise ValueError(f"scaled must be True or False, got {scaled!r}")


def plot_dot_product_variance(
    d_ks: Sequence[int],
    variances: Sequence[float],
    ses: Sequence[float],
    scaled_variances: Sequence[float],
    scaled_ses: Sequence[float],
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Log-log plot of the measured ``Var(q . k)`` and ``Var(q . k / sqrt(d_k))`` against
    ``d_k``, with 4-standard-error bars and the predictions ``d_k`` and 1."""
    d = np.asarray(d_ks, dtype=float)
    if not (len(d) == len(variances) == len(ses) == len(scaled_variances) == len(scaled_ses)):
        raise ValueError("d_ks, variances, ses, scaled_variances, scaled_ses must have one "
                         "entry per d_k")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(d, d, color="tab:blue", lw=1, alpha=0.6, label="prediction $d_k$")
    ax.plot(d, np.ones_like(d), color="tab:orange", lw=1, alpha=0.6, label="prediction 1")
    ax.errorbar(d, variances, yerr=4 * np.asarray(ses), fmt="o", color="tab:blue",
                ms=4, capsize=2, label=r"measured $\mathrm{Var}(q\cdot k)$")
    ax.errorbar(d, scaled_variances, yerr=4 * np.asarray(scaled_ses), fmt="s",
                color="tab:orange", ms=4, capsize=2,
                label=r"measured $\mathrm{Var}(q\cdot k/\sqrt{d_k})$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("$d_k$")
    ax.set_ylabel("variance of the score")
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_scaling_view(
    d_k: int,
    scaled: bool = True,
    n_keys: int = 16,
    n_rows: int = 1000,
    seed: int = 0,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-3 explorer's view for random ``q`` and ``k`` of width ``d_k``.

    Left: the histogram of the scores (unscaled ``q . k`` or ``q . k / sqrt(d_k)``) with
    the normal density the variance argument predicts. Middle: the softmax of one row
    of ``n_keys`` scores. Right: that row's softmax Jacobian ``diag(p) - p p^T``, with
    its Frobenius norm and the median norm over all ``n_rows`` rows.
    """
    from ..experiments.variance import attention_score_rows, softmax_jacobian, softmax_stats

    raw = attention_score_rows(d_k, n_rows, n_keys, torch.Generator().manual_seed(seed),
                               scaled=False)
    scores = raw / math.sqrt(d_k) if scaled else raw
    stats = softmax_stats(scores)
    row, jac = torch.softmax(scores[0], -1), softmax_jacobian(scores[0])
    if fig is None:
        fig = plt.figure(figsize=(12, 3.6))
    ax_hist, ax_row, ax_jac = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1, 0.9]})

    values = scores.flatten().numpy()
    predicted_std = 1.0 if scaled else math.sqrt(d_k)
    ax_hist.hist(values, bins=60, density=True, color="tab:blue", alpha=0.7)
    grid = np.linspace(values.min(), values.max(), 200)
    density = np.exp(-0.5 * (grid / predicted_std) ** 2) / (predicted_std * math.sqrt(2 * math.pi))
    ax_hist.plot(grid, density, color="tab:orange", label=f"N(0, {predicted_std:.3g}²)")
    ax_hist.set_xlabel(r"score $q\cdot k/\sqrt{d_k}$" if scaled else r"score $q\cdot k$")
    ax_hist.set_ylabel("density")
    ax_hist.set_title(f"d_k = {d_k}, {'scaled' if scaled else 'unscaled'}: "
                      f"std {values.std():.2f}")
    ax_hist.legend(fontsize=8, loc="upper right")

    ax_row.bar(range(n_keys), row.numpy(), color="tab:blue")
    ax_row.set_ylim(0, 1)
    ax_row.set_xlabel("key")
    ax_row.set_ylabel("softmax weight")
    ax_row.set_title(f"one row: max weight {float(row.max()):.2f}")

    image = ax_jac.imshow(jac.numpy(), vmin=-0.25, vmax=0.25, cmap="RdBu_r")
    ax_jac.set_xticks([])
    ax_jac.set_yticks([])
    ax_jac.set_title(f"its Jacobian: norm {float(torch.linalg.matrix_norm(jac)):.3f}\n"
                     f"median over rows {float(stats['jacobian_norm'].median()):.3f}")
    fig.colorbar(image, ax=ax_jac, fraction=0.046, pad=0.04)
    return fig


def plot_scaling_training(
    curves: dict[str, Sequence[float]],
    ax: plt.Axes | None = None,
    title: str | None = None,
    chance: float | None = None,
    smooth: int = 10,
) -> plt.Axes:
    """Training-loss curves, one per label, smoothed by a running mean of ``smooth``
    steps; a curve that ends in NaN or inf is drawn up to its last finite loss and
    marked with an x."""
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be a positive int, got {smooth!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, losses in curves.items():
        losses = np.asarray(losses, dtype=float)
        finite = np.isfinite(losses)
        n = int(np.argmin(finite)) if not finite.all() else len(losses)
        kept = losses[:n]
        if n >= smooth:
            kept = np.convolve(kept, np.ones(smooth) / smooth, mode="valid")
        steps = np.arange(len(kept)) + (smooth - 1 if n >= smooth else 0)
        (line,) = ax.plot(steps, kept, label=label if finite.all() else f"{label} (diverged)")
        if not finite.all():
            ax.plot([steps[-1] if len(steps) else 0], [kept[-1] if len(kept) else 0],
                    "x", color=line.get_color(), ms=8)
    if chance is not None:
        ax.axhline(chance, color="gray", ls=":", lw=1, label="chance")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def scaling_explorer(n_keys: int = 16, seed: int = 0, twin: bool = True, d_k: int = 64,
                     scaled: bool = True):
    """Chapter 3: pick ``d_k`` (1 to 1024) and switch the ``1/sqrt(d_k)`` scaling on or off.

    ``d_k`` (one of :data:`SCALING_D_KS`) and ``scaled`` are the setting shown first, by the
    live explorer and its twin alike.

    Redraws :func:`aiayn.figures.variance.plot_scaling_view`: the histogram of the scores, one
    softmax row and its Jacobian. Every setting stays finite: the softmax subtracts
    the row maximum, so even unscaled scores at ``d_k = 1024`` give a one-hot row,
    not NaN. Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w

    _check_opening(d_k, scaled)
    width = w.SelectionSlider(style={"description_width": "initial"},
                              options=list(SCALING_D_KS), value=d_k, description="d_k")
    divide = w.Checkbox(style={"description_width": "initial"}, value=scaled,
                        description="divide by sqrt(d_k)")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_scaling_view(width.value, divide.value, n_keys=n_keys, seed=seed)
            show_view(fig, scaling_caption(width.value, divide.value, n_keys, seed)[0])

    for control in (width, divide):
        control.observe(redraw, names="value")
    redraw()
    twin = scaling_twin(n_keys, seed, d_k, scaled) if twin and can_build_twin() else None
    return explorer_box([w.HBox([width, divide]), out], twin)


def scaling_caption(d_k: int, scaled: bool, n_keys: int = 16, seed: int = 0) -> tuple[str, dict]:
    """What a view of :func:`scaling_explorer` shows, in words (its alt text and caption, live
    and in the HTML twin), and the number behind it: the standard deviation of the scores."""
    from ..experiments.variance import attention_score_rows

    raw = attention_score_rows(d_k, 1000, n_keys, torch.Generator().manual_seed(seed),
                               scaled=False)
    scores = raw / math.sqrt(d_k) if scaled else raw
    std = float(scores.flatten().std(unbiased=False))
    return (f"d_k = {d_k}, {'scaled' if scaled else 'unscaled'}: the scores' standard "
            f"deviation is {std:.2f}", {"std": f"{std:.4f}"})


def scaling_twin(n_keys: int = 16, seed: int = 0, d_k: int = 64, scaled: bool = True):
    """The precomputed twin of :func:`scaling_explorer` for the HTML book: every ``d_k`` of
    the live slider (1 to 1024) with the scaling on and off, opening on ``d_k`` and
    ``scaled``."""
    _check_opening(d_k, scaled)

    def caption(d_k, scaled):
        return scaling_caption(d_k, scaled, n_keys, seed)

    controls = [Control("d_k", [(str(d), d) for d in SCALING_D_KS], SCALING_D_KS.index(d_k)),
                Control("divide by sqrt(d_k)", [("yes", True), ("no", False)],
                        0 if scaled else 1, "toggle")]
    return grid_explorer(
        controls, lambda width, divide: plot_scaling_view(width, divide, n_keys=n_keys,
                                                          seed=seed),
        caption)
