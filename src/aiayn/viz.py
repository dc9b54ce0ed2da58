"""Plots the chapters share. Every function takes ``ax=None`` (or ``fig=None``),
returns what it drew on, and never calls ``plt.show()``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = [
    "use_book_style",
    "plot_attention",
    "plot_weight_bars",
    "plot_attention_view",
    "plot_gradient_decay",
    "plot_dot_product_variance",
    "plot_scaling_view",
    "plot_scaling_training",
    "plot_head_maps",
    "plot_head_masses",
    "plot_head_view",
    "plot_positional_encoding",
    "plot_positional_view",
    "plot_accuracy_curves",
    "plot_translation",
    "plot_gradient_norms",
    "plot_training_runs",
    "plot_model_attention",
    "plot_layer_costs",
    "plot_measured_costs",
    "plot_hops",
]


def use_book_style() -> None:
    """One look for every figure of the book: readable fonts, no top/right spines, PNG output."""
    plt.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": False,
        "image.cmap": "Blues",
        "figure.constrained_layout.use": True,
    })
    try:  # PNG only: SVG text is not byte-stable and nbval compares outputs
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # not in IPython
        pass


def _as_2d(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double().numpy()
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D (queries, keys) matrix, got shape {weights.shape}")
    return weights


def plot_attention(
    weights,
    row_tokens: Sequence[str] | None = None,
    col_tokens: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    annotate: bool = True,
    title: str | None = None,
) -> plt.Axes:
    """Heatmap of a ``(T, S)`` attention matrix: row = query token, column = key token."""
    w = _as_2d(weights)
    rows = list(row_tokens) if row_tokens is not None else [str(i) for i in range(w.shape[0])]
    cols = list(col_tokens) if col_tokens is not None else [str(j) for j in range(w.shape[1])]
    if len(rows) != w.shape[0] or len(cols) != w.shape[1]:
        raise ValueError(
            f"got {len(rows)} row and {len(cols)} column labels for weights of shape {w.shape}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * len(cols), 0.8 + 0.45 * len(rows)))
    image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    if annotate and w.size <= 144:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_weight_bars(
    row, tokens: Sequence[str], ax: plt.Axes | None = None, highlight: int | None = None,
    title: str | None = None,
) -> plt.Axes:
    """Bar chart of one query's attention distribution over the keys."""
    w = _as_2d(np.atleast_2d(row.detach().cpu().numpy() if isinstance(row, torch.Tensor) else row))[0]
    if len(tokens) != w.shape[0]:
        raise ValueError(f"got {len(tokens)} tokens for {w.shape[0]} weights")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.0))
    colors = ["tab:orange" if j == highlight else "tab:blue" for j in range(len(tokens))]
    ax.bar(range(len(tokens)), w, color=colors)
    ax.set_xticks(range(len(tokens)), list(tokens), rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("attention weight")
    if title:
        ax.set_title(title)
    return ax


def plot_attention_view(
    tokens: Sequence[str],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query_index: int = 0,
    temperature: float = 1.0,
    causal: bool = False,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-2 explorer's view: the whole weight matrix and one query's row.

    Scores are ``q.k / (sqrt(d_k) * temperature)``: temperature 1 is the paper's
    scaling, small temperatures sharpen the softmax towards a one-hot row, large
    ones flatten it towards uniform.
    """
    from .attention import scaled_dot_product_attention
    from .masks import causal_mask

    n = len(tokens)
    if not 0 <= query_index < n:
        raise ValueError(f"query_index must be in [0, {n - 1}], got {query_index}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    mask = causal_mask(n, device=query.device) if causal else None
    scale = 1.0 / (math.sqrt(query.shape[-1]) * temperature)
    _, weights = scaled_dot_product_attention(query, key, value, mask, scale=scale)
    if fig is None:
        fig = plt.figure(figsize=(10, 4))
    ax_map, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    plot_attention(weights, tokens, tokens, ax=ax_map, annotate=n <= 6,
                   title=f"weights (temperature {temperature:.3g}{', causal' if causal else ''})")
    ax_map.add_patch(plt.Rectangle((-0.5, query_index - 0.5), n, 1, fill=False,
                                   edgecolor="tab:orange", linewidth=2))
    row = weights[query_index]
    plot_weight_bars(row, tokens, ax=ax_bar, highlight=int(row.argmax()),
                     title=f"query '{tokens[query_index]}': max {float(row.max()):.2f}")
    return fig


# ------------------------------------------------------- chapter 5: positional encoding


def plot_positional_encoding(
    pe, ax: plt.Axes | None = None, title: str | None = None,
    position: int | None = None, dimension: int | None = None,
) -> plt.Axes:
    """Heatmap of a ``(n_positions, d_model)`` encoding table: row = position, column =
    dimension, colour = value in [-1, 1]; optional lines mark one position and one dimension."""
    table = _as_2d(pe)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    image = ax.imshow(table, vmin=-1.0, vmax=1.0, cmap="RdBu_r", aspect="auto",
                      interpolation="nearest")
    ax.set_xlabel("dimension $j$ (even: sin, odd: cos)")
    ax.set_ylabel("position $pos$")
    if position is not None:
        ax.axhline(position, color="tab:orange", linewidth=1.5)
    if dimension is not None:
        ax.axvline(dimension, color="tab:green", linewidth=1.5)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="PE value")
    return ax


def plot_positional_view(
    position: int, dimension: int, d_model: int = 128, n_positions: int = 128,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-5 explorer's view of the sinusoidal table (Section 3.5), four panels:
    the table with the chosen position (row) and dimension (column) marked; the
    encoding vector ``PE[position]``; the chosen dimension across positions (one
    sinusoid, its wavelength in the title); and the similarity
    ``PE[position] . PE[q] / (d_model / 2)`` against every position ``q``
    (1 at ``q = position``: every encoding has squared norm ``d_model / 2``).
    """
    from .positional import sinusoidal_encoding, wavelengths

    if not isinstance(n_positions, int) or n_positions < 1:
        raise ValueError(f"n_positions must be a positive int, got {n_positions!r}")
    if not 0 <= position < n_positions:
        raise ValueError(f"position must be in [0, {n_positions - 1}], got {position}")
    if not 0 <= dimension < d_model:
        raise ValueError(f"dimension must be in [0, {d_model - 1}], got {dimension}")
    pe = sinusoidal_encoding(n_positions, d_model, torch.float64).numpy()
    if fig is None:
        fig = plt.figure(figsize=(11, 7))
    (ax_map, ax_vec), (ax_dim, ax_sim) = fig.subplots(2, 2)
    plot_positional_encoding(pe, ax=ax_map, position=position, dimension=dimension,
                             title=f"PE table, d_model = {d_model}")
    dims = np.arange(d_model)
    ax_vec.plot(dims[0::2], pe[position, 0::2], color="tab:orange", linewidth=1,
                label="sin (even $j$)")
    ax_vec.plot(dims[1::2], pe[position, 1::2], color="tab:blue", linewidth=1,
                label="cos (odd $j$)")
    ax_vec.plot([dimension], [pe[position, dimension]], "o", color="tab:green")
    ax_vec.legend(loc="lower right", fontsize=8)
    ax_vec.set(xlabel="dimension $j$", ylabel="value", ylim=(-1.1, 1.1),
               title=f"encoding vector PE[{position}]")
    positions = np.arange(n_positions)
    wavelength = float(wavelengths(d_model)[dimension // 2])
    kind = "sin" if dimension % 2 == 0 else "cos"
    ax_dim.plot(positions, pe[:, dimension], color="tab:green", linewidth=1)
    ax_dim.plot([position], [pe[position, dimension]], "o", color="tab:orange")
    ax_dim.set(xlabel="position $pos$", ylabel="value", ylim=(-1.1, 1.1),
               title=f"dimension {dimension} ({kind}), wavelength {wavelength:,.1f}")
    similarity = pe @ pe[position] / (d_model / 2)  # cos similarity: |PE|^2 = d_model / 2
    ax_sim.plot(positions, similarity, color="tab:purple", linewidth=1)
    ax_sim.axvline(position, color="tab:orange", linewidth=1, linestyle="--")
    ax_sim.set(xlabel="position $q$", ylabel="similarity", ylim=(-0.1, 1.05),
               title=f"PE[{position}] · PE[q] / (d_model/2)")
    return fig


def plot_accuracy_curves(
    curves: dict, seen_max: int, chance: float | None = None, ax: plt.Axes | None = None,
    xlabel: str = "sequence length", title: str | None = None,
) -> plt.Axes:
    """Accuracy curves ``{label: (x, y)}`` with the range seen in training shaded
    (x up to ``seen_max``, inclusive) and an optional chance level."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    x_max = max(float(np.max(np.asarray(x))) for x, _ in curves.values())
    ax.axvspan(0, seen_max + 0.5, color="0.92", label=f"seen in training (≤ {seen_max})")
    for label, (x, y) in curves.items():
        ax.plot(np.asarray(x), np.asarray(y), marker=".", label=label)
    if chance is not None:
        ax.axhline(chance, color="0.4", linestyle=":", label="chance")
    ax.set(xlabel=xlabel, ylabel="accuracy", ylim=(0, 1.05), xlim=(0, x_max + 0.5))
    if title:
        ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    return ax


# ------------------------------------------------------ chapter 3: why divide by sqrt(d_k)


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
    from .scaling import attention_score_rows, softmax_jacobian, softmax_stats

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


# ------------------------------------------------------------ chapter 1: recurrence


def plot_gradient_decay(
    radii: Sequence[float],
    length: int = 100,
    d_model: int = 64,
    input_std: float = 0.1,
    seed: int = 0,
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Gradient norm ``||dL/dh_{n-k}||`` against the distance ``k`` for recurrent layers
    whose ``W_hh`` has spectral radius ``radii`` (one solid curve each), with the linear
    prediction ``radius**k`` dashed. Computed by :func:`aiayn.rnn.gradient_decay`."""
    from .rnn import fit_geometric_rate, gradient_decay

    radii = list(radii)
    if not radii:
        raise ValueError("radii must hold at least one spectral radius")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    k = np.arange(length + 1)
    low, high = 0.0, 0.0  # log10 range of the measured curves
    for i, radius in enumerate(radii):
        log_norms = gradient_decay(radius, length, d_model, input_std, seed=seed)
        rate = fit_geometric_rate(log_norms, start=min(10, length - 1))
        log10 = log_norms.numpy() / math.log(10)
        low, high = min(low, log10.min()), max(high, log10.max())
        color = f"C{i % 10}"
        ax.semilogy(k, 10.0 ** np.clip(log10, -300, 300), color=color,
                    label=f"radius {radius:g}: rate {rate:.3f}")
        reference = np.clip(k * math.log10(radius), -300, 300)
        ax.semilogy(k, 10.0 ** reference, color=color, linestyle="--", linewidth=0.8)
    ax.set_ylim(10.0 ** max(low - 1, -300), 10.0 ** min(high + 1, 300))
    ax.axhline(1.0, color="gray", linewidth=0.5)
    ax.set_xlabel("distance $n - t$ (steps)")
    ax.set_ylabel(r"$\|\partial L / \partial h_t\|$")
    ax.set_title(f"gradient through a tanh RNN (dashed: radius$^{{n-t}}$), d={d_model}")
    ax.legend(fontsize=8, loc="best")
    return ax


# ------------------------------------------------------ chapter 4: what each head attends to


def _mark_relations(ax: plt.Axes, n_rows: int, matching: Sequence[int] | None) -> None:
    """Outline, in each query row, the previous token (green) and the matching one (orange)."""
    for t in range(n_rows):
        if t > 0:
            ax.add_patch(plt.Rectangle((t - 1.5, t - 0.5), 1, 1, fill=False,
                                       edgecolor="tab:green", linewidth=1.5))
        if matching is not None:
            ax.add_patch(plt.Rectangle((int(matching[t]) - 0.5, t - 0.5), 1, 1, fill=False,
                                       edgecolor="tab:orange", linewidth=1.5, linestyle="--"))


def plot_head_maps(
    maps: Sequence,
    tokens: Sequence[str],
    titles: Sequence[str],
    matching: Sequence[int] | None = None,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """One ``(T, T)`` attention map per panel, side by side, with the previous token
    (green) and the matching token (orange, dashed) outlined in every query row."""
    if len(maps) != len(titles) or not maps:
        raise ValueError(f"got {len(maps)} maps and {len(titles)} titles; need one title per map")
    n = len(tokens)
    if fig is None:
        fig = plt.figure(figsize=(3.3 * len(maps) + 0.8, 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(maps), sharey=True))
    for ax, weights, title in zip(axes, maps, titles, strict=True):
        w = _as_2d(weights)
        if w.shape != (n, n):
            raise ValueError(f"each map must be ({n}, {n}) for {n} tokens, got {w.shape}")
        image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
        ax.set_xticks(range(n), list(tokens), rotation=90, fontsize=8)
        ax.set_yticks(range(n), list(tokens), fontsize=8)
        ax.set_xlabel("key")
        ax.set_title(title, fontsize=10)
        _mark_relations(ax, n, matching)
    axes[0].set_ylabel("query")
    fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02, label="weight")
    return fig


def plot_head_masses(
    summaries: dict[str, dict[str, float]],
    measures: Sequence[str] = ("previous", "matching", "itself"),
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Grouped bars: for each head (a key of ``summaries``), its mean attention mass on
    the previous token, the matching token and itself (rows of
    :func:`aiayn.multihead.head_summary`)."""
    if not summaries:
        raise ValueError("summaries must name at least one head")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2))
    names = list(summaries)
    width = 0.8 / len(measures)
    colors = {"previous": "tab:green", "matching": "tab:orange", "itself": "tab:gray"}
    for i, measure in enumerate(measures):
        heights = [summaries[name][measure] for name in names]
        ax.bar(np.arange(len(names)) + (i - (len(measures) - 1) / 2) * width, heights,
               width, label=measure, color=colors.get(measure))
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean attention mass")
    ax.legend(frameon=False, ncols=len(measures), loc="upper right")
    return ax


def plot_head_view(
    maps,
    tokens: Sequence[str],
    layer: int = 0,
    head: int = 0,
    matching: Sequence[int] | None = None,
    fig: plt.Figure | None = None,
) -> plt.Figure:
    """The chapter-4 explorer's view of one input: the map of one head of one layer
    (``maps`` is ``(L, H, T, T)``), and the share of each query's attention that lands
    on the previous token, the matching token, itself, and elsewhere."""
    maps = torch.as_tensor(maps).detach().cpu().double()
    if maps.dim() != 4 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"maps must be (layers, heads, T, T), got shape {tuple(maps.shape)}")
    n_layers, n_heads, n, _ = maps.shape
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {layer}")
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in [0, {n_heads - 1}], got {head}")
    if len(tokens) != n:
        raise ValueError(f"got {len(tokens)} tokens for maps of {n} positions")
    w = maps[layer, head]
    t = torch.arange(n)
    previous = torch.zeros(n, dtype=w.dtype)
    previous[1:] = w[t[1:], t[1:] - 1]
    itself = w.diagonal()
    match = (w[t, torch.as_tensor(list(matching))] if matching is not None
             else torch.zeros(n, dtype=w.dtype))
    other = (1 - previous - itself - match).clamp_min(0)
    if fig is None:
        fig = plt.figure(figsize=(10, 4))
    ax_map, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.05, 1]})
    image = ax_map.imshow(w.numpy(), vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    ax_map.set_xticks(range(n), list(tokens), rotation=90, fontsize=8)
    ax_map.set_yticks(range(n), list(tokens), fontsize=8)
    ax_map.set_xlabel("key")
    ax_map.set_ylabel("query")
    ax_map.set_title(f"layer {layer}, head {head} of {n_heads}")
    _mark_relations(ax_map, n, matching)
    fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04, label="weight")
    bottom = np.zeros(n)
    for part, color, label in ((previous, "tab:green", "previous"),
                               (match, "tab:orange", "matching"),
                               (itself, "tab:gray", "itself"),
                               (other, "lightsteelblue", "elsewhere")):
        ax_bar.barh(range(n), part.numpy(), left=bottom, color=color, label=label)
        bottom += part.numpy()
    ax_bar.set_yticks(range(n), list(tokens), fontsize=8)
    ax_bar.invert_yaxis()  # same row order as the map
    ax_bar.set_xlim(0, 1)
    ax_bar.set_xlabel("share of the query's attention")
    ax_bar.legend(frameon=False, ncols=4, fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.13))  # below the axis: no bar hidden
    prev_mean = float(previous[1:].mean()) if n > 1 else 0.0
    ax_bar.set_title(f"mean: previous {prev_mean:.2f}, matching {float(match.mean()):.2f}")
    return fig


def plot_translation(result: dict, title: str | None = None) -> plt.Figure:
    """Chapter 7: a translation from :func:`aiayn.decode.translate`: the confidence of each
    output character (top) and where the decoder looked while writing it (bottom)."""
    if result.get("error"):
        raise ValueError(f"nothing to plot: {result['error']}")
    chars, source = result["chars"], result["source"]
    weights = np.asarray(result["attention"], dtype=float)  # (T, S)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(6.0, 0.32 * len(source) + 2.5), 6.2),
        gridspec_kw={"height_ratios": [1, 3]},
    )
    top.bar(range(len(chars)), result["confidence"], color="#4c72b0")
    top.set_xticks(range(len(chars)), chars)
    top.set_ylim(0, 1.05)
    top.set_ylabel("probability")
    top.set_title(title or f"output: {result['output']!r}")
    image = bottom.imshow(weights, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    bottom.set_xticks(range(len(source)), [c if c != " " else "␣" for c in source])
    bottom.set_yticks(range(len(chars)), chars)
    bottom.set_xlabel("source character (attended to)")
    bottom.set_ylabel("output character")
    fig.colorbar(image, ax=bottom, fraction=0.03, pad=0.02, label="cross-attention")
    return fig


# ------------------------------------------------- chapter 6: the encoder-decoder


def plot_gradient_norms(norms: dict, ax: plt.Axes | None = None,
                        title: str | None = None) -> plt.Axes:
    """Gradient norm per layer, ``{label: {"encoder": [..], "decoder": [..]}}`` (from
    :func:`aiayn.architecture.layer_gradient_norms`): encoder layers 1..N, then decoder
    layers 1..N, on a log scale."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, by_stack in norms.items():
        n_enc, n_dec = len(by_stack["encoder"]), len(by_stack["decoder"])
        values = [*by_stack["encoder"], *by_stack["decoder"]]
        ax.plot(range(1, n_enc + n_dec + 1), values, marker=".", label=label)
    ax.axvline(n_enc + 0.5, color="0.6", lw=0.8)
    ax.set_yscale("log")
    ax.set(xlabel=f"layer (1-{n_enc}: encoder, {n_enc + 1}-{n_enc + n_dec}: decoder)",
           ylabel="gradient norm of the layer")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_training_runs(curves: dict, ylabel: str = "label-smoothed loss", smooth: int = 20,
                       ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Per-step curves ``{label: values}``, each smoothed by a running mean over
    ``smooth`` steps (a run that stopped early simply ends there)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, values in curves.items():
        y = np.asarray(values, dtype=float)
        width = max(1, min(smooth, len(y)))
        mean = np.convolve(y, np.ones(width) / width, mode="valid")
        ax.plot(np.arange(width, len(y) + 1), mean, label=label)
    ax.set(xlabel="step", ylabel=ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_model_attention(maps: dict, kind: str, layer: int, head: int | None,
                         source: Sequence[str], target: Sequence[str],
                         ax: plt.Axes | None = None) -> plt.Axes:
    """One map of :func:`aiayn.architecture.attention_maps` (first example of the batch):
    ``kind`` (encoder self, decoder self, cross), ``layer`` from 0, ``head`` from 0 or
    None for the mean over heads. ``source`` and ``target`` label the encoder's and the
    decoder's positions."""
    if kind not in maps:
        raise ValueError(f"kind must be one of {list(maps)}, got {kind!r}")
    n_layers, n_heads = len(maps[kind]), maps[kind][0].shape[1]
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {layer}")
    if head is not None and not 0 <= head < n_heads:
        raise ValueError(f"head must be None or in [0, {n_heads - 1}], got {head}")
    weights = maps[kind][layer][0]  # (H, queries, keys)
    weights = weights.mean(dim=0) if head is None else weights[head]
    rows = list(source) if kind == "encoder self" else list(target)
    cols = list(target) if kind == "decoder self" else list(source)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 0.3 * len(cols) + 2.5),
                                      max(3.0, 0.3 * len(rows) + 1.5)))
    which = "mean of the heads" if head is None else f"head {head + 1}"
    show = [c if c != " " else "␣" for c in cols]
    plot_attention(weights, [r if r != " " else "␣" for r in rows], show, ax=ax,
                   annotate=False, title=f"{kind}, layer {layer + 1}, {which}")
    return ax


_LAYER_COLORS = {"self-attention": "#4c72b0", "recurrent": "#dd8452",
                 "convolutional": "#55a868", "restricted": "#8172b3"}


def plot_layer_costs(d: int, k: int = 3, r: int = 31, n_max: int = 8192,
                     ax: plt.Axes | None = None) -> plt.Axes:
    """Chapter 8: the FLOPs of Table 1's four layers against ``n`` at width ``d`` (log-log),
    with the self-attention / recurrent crossover at ``n = d`` marked."""
    from .complexity import LAYER_KINDS, crossover_length, layer_cost

    if ax is None:
        _, ax = plt.subplots()
    ns = np.unique(np.geomspace(4, max(n_max, 8), 80).astype(int))
    for kind in LAYER_KINDS:
        flops = [layer_cost(kind, int(n), d, k=k, r=r).flops for n in ns]
        label = {"convolutional": f"convolutional (k={k})",
                 "restricted": f"restricted (r={r})"}.get(kind, kind)
        ax.loglog(ns, flops, color=_LAYER_COLORS[kind], label=label)
    cross = crossover_length(d)
    if ns[0] <= cross <= ns[-1]:
        ax.axvline(cross, color="0.4", ls="--", lw=1)
        ax.annotate(f"n = d = {d}", (cross, ax.get_ylim()[0]), xytext=(4, 6),
                    textcoords="offset points", fontsize=9, color="0.3")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("FLOPs per layer (one sequence)")
    ax.set_title(f"Table 1 as FLOPs, d = {d}")
    ax.legend(fontsize=8)
    return ax


def plot_measured_costs(x: Sequence[float], values: dict, slopes: dict | None = None,
                        xlabel: str = "sequence length n", ylabel: str = "seconds",
                        title: str | None = None, ax: plt.Axes | None = None) -> plt.Axes:
    """Chapter 8: measured times (or bytes) of each layer kind against ``x`` on log-log
    axes; ``slopes`` (fitted exponents) go into the legend."""
    if ax is None:
        _, ax = plt.subplots()
    for name, ys in values.items():
        label = name if not slopes or name not in slopes else f"{name} (slope {slopes[name]:.2f})"
        ax.loglog(x, ys, "o-", color=_LAYER_COLORS.get(name), label=label, ms=4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_hops(hops: dict, fig: plt.Figure | None = None) -> plt.Figure:
    """Chapter 8: one heatmap per layer kind: how many layers (or recurrent steps) until
    output ``i`` depends on input ``j``; white where it never does."""
    if fig is None:
        fig = plt.figure(figsize=(3.0 * len(hops), 3.2))
    axes = fig.subplots(1, len(hops), squeeze=False)[0]
    vmax = max(int(torch.as_tensor(h).max()) for h in hops.values())
    for ax, (name, h) in zip(axes, hops.items(), strict=True):
        h = torch.as_tensor(h).float()
        shown = np.ma.masked_where(h.numpy() == 0, h.numpy())
        image = ax.imshow(shown, cmap="viridis", vmin=1, vmax=vmax)
        ax.set_title(f"{name}\nmax {int(h.max())}", fontsize=10)
        ticks = range(0, h.shape[0], max(1, h.shape[0] // 4))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("input j")
    axes[0].set_ylabel("output i")
    fig.colorbar(image, ax=list(axes), fraction=0.02, pad=0.02, label="hops")
    return fig
