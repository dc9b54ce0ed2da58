"""ipywidgets explorers. ipywidgets is imported lazily so ``import aiayn`` works without it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "attention_explorer",
    "gradient_decay_explorer",
    "scaling_explorer",
    "head_explorer",
    "positional_explorer",
    "date_explorer",
    "encoder_decoder_explorer",
    "complexity_explorer",
]


def attention_explorer(
    tokens: Sequence[str], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
):
    """Pick a query token, change the softmax temperature, toggle the causal mask.

    Redraws :func:`aiayn.viz.plot_attention_view` on every change. The temperature
    slider spans 0.01 to 100 on a log scale; both ends stay finite (the softmax
    subtracts the row maximum), so no setting produces NaN.
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .viz import plot_attention_view

    if len(tokens) != query.shape[-2]:
        raise ValueError(f"got {len(tokens)} tokens for {query.shape[-2]} query rows")
    pick = w.Dropdown(options=[(t, i) for i, t in enumerate(tokens)], value=0, description="query")
    temperature = w.FloatLogSlider(value=1.0, base=10, min=-2, max=2, step=0.05,
                                   description="temperature", readout_format=".2f")
    causal = w.Checkbox(value=False, description="causal mask")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_attention_view(tokens, query, key, value, pick.value,
                                      temperature.value, causal.value)
            # display + close, not plt.show(fig): show() takes no figure (TypeError on
            # non-inline backends), and closing stops every redraw leaking a figure.
            display(fig)
            plt.close(fig)

    for control in (pick, temperature, causal):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([pick, temperature, causal]), out])


def positional_explorer(d_model: int = 128, n_positions: int = 128):
    """Pick a position and a dimension of the sinusoidal table (chapter 5).

    Redraws :func:`aiayn.viz.plot_positional_view` on every change: the table, the
    encoding vector of the position, the dimension's sinusoid, and the similarity of
    the position's encoding to every other. Both sliders cover their full ranges
    (position 0 to ``n_positions - 1``, dimension 0 to ``d_model - 1``).
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .viz import plot_positional_view

    position = w.IntSlider(value=min(10, n_positions - 1), min=0, max=n_positions - 1,
                           description="position")
    dimension = w.IntSlider(value=0, min=0, max=d_model - 1, description="dimension")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_positional_view(position.value, dimension.value, d_model, n_positions)
            display(fig)  # display + close: see attention_explorer
            plt.close(fig)

    for control in (position, dimension):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([position, dimension]), out])


def scaling_explorer(n_keys: int = 16, seed: int = 0):
    """Chapter 3: pick ``d_k`` (1 to 1024) and switch the ``1/sqrt(d_k)`` scaling on or off.

    Redraws :func:`aiayn.viz.plot_scaling_view`: the histogram of the scores, one
    softmax row and its Jacobian. Every setting stays finite: the softmax subtracts
    the row maximum, so even unscaled scores at ``d_k = 1024`` give a one-hot row,
    not NaN. Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .viz import plot_scaling_view

    d_k = w.SelectionSlider(options=[2**i for i in range(11)], value=64, description="d_k")
    scaled = w.Checkbox(value=True, description="divide by sqrt(d_k)")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_scaling_view(d_k.value, scaled.value, n_keys=n_keys, seed=seed)
            display(fig)  # display + close: no leaked figures (see attention_explorer)
            plt.close(fig)

    for control in (d_k, scaled):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([d_k, scaled]), out])


def gradient_decay_explorer(d_model: int = 64, input_std: float = 0.1, seed: int = 0):
    """Move the spectral radius of ``W_hh`` and the sequence length; the curve of the
    gradient norm against distance redraws (:func:`aiayn.viz.plot_gradient_decay`).

    The radius spans 0.3 to 2.5 and the length 10 to 300 steps; the norms are carried
    as logarithms, so neither extreme underflows, overflows or gives NaN.
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from . import viz

    radius = w.FloatSlider(value=0.9, min=0.3, max=2.5, step=0.05,
                           description="radius", readout_format=".2f")
    length = w.IntSlider(value=100, min=10, max=300, step=10, description="length")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            ax = viz.plot_gradient_decay([radius.value], length.value, d_model,
                                         input_std, seed)
            display(ax.figure)
            plt.close(ax.figure)

    for control in (radius, length):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([radius, length]), out])


def head_explorer(models: dict, tokens: torch.Tensor, labels: Sequence[Sequence[str]],
                  matching: torch.Tensor | None = None):
    """Chapter 4: pick a trained model, a layer, a head and an input; the map redraws.

    ``models`` maps a name to a model with an ``attention_maps(tokens)`` method returning
    ``(L, B, H, T, T)`` (e.g. :class:`aiayn.multihead.TinyEncoder`); ``tokens`` ``(N, T)``
    are the inputs to choose from, ``labels`` their printed tokens, ``matching`` ``(N, T)``
    the position of each token's match (outlined in orange). The maps are computed once, so
    every control only redraws :func:`aiayn.viz.plot_head_view`. Switching the model resets
    the layer and head menus to what that model has.
    Returns the widget box (display it as the last expression of a cell).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .viz import plot_head_view

    if not models:
        raise ValueError("models must name at least one model")
    if tokens.dim() != 2 or len(labels) != tokens.shape[0]:
        raise ValueError(f"got {len(labels)} label rows for tokens of shape {tuple(tokens.shape)}")
    if matching is not None and matching.shape != tokens.shape:
        raise ValueError(f"matching must have the shape of tokens {tuple(tokens.shape)}, "
                         f"got {tuple(matching.shape)}")
    maps = {name: m.attention_maps(tokens).cpu() for name, m in models.items()}  # (L, N, H, T, T)

    model = w.Dropdown(options=list(models), description="model")
    layer = w.Dropdown(description="layer")
    head = w.Dropdown(description="head")
    example = w.IntSlider(value=0, min=0, max=tokens.shape[0] - 1, description="input")
    out = w.Output()
    updating = False

    def set_menus():
        n_layers, _, n_heads = maps[model.value].shape[:3]
        layer.options = list(range(n_layers))
        head.options = list(range(n_heads))
        layer.value, head.value = 0, 0

    def redraw(*_):
        if updating:
            return
        with out:
            out.clear_output(wait=True)
            i = example.value
            fig = plot_head_view(
                maps[model.value][:, i], labels[i], layer.value, head.value,
                None if matching is None else matching[i].tolist(),
            )
            display(fig)  # display + close: no leaked figures (see attention_explorer)
            plt.close(fig)

    def on_model(*_):
        nonlocal updating
        updating = True  # changing the menus fires their observers: draw once, after
        try:
            set_menus()
        finally:
            updating = False
        redraw()

    set_menus()
    model.observe(on_model, names="value")
    for control in (layer, head, example):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([model, layer, head]), example, out])


def date_explorer(model, tokenizer, text: str = "Nov 29, 2026"):
    """Chapter 7: type a date in any form and see the model's ISO date, the confidence
    of each character and the cross-attention. A beam-size slider switches between
    greedy decoding (1) and beam search; input the model cannot read gets a message."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .decode import translate
    from .viz import plot_translation

    box = w.Text(value=text, description="date", continuous_update=False)
    beam = w.IntSlider(value=1, min=1, max=8, description="beam size")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            result = translate(model, tokenizer, box.value, beam.value)
            if result["error"]:
                print(f"Cannot read this input: {result['error']}")
                return
            fig = plot_translation(result)
            display(fig)
            plt.close(fig)

    for control in (box, beam):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([box, beam]), out])


def encoder_decoder_explorer(model, tokenizer, text: str = "Nov 29, 2026"):
    """Chapter 6: every attention map of a trained date model. Type a date; pick the kind
    of attention (encoder self, decoder self, cross), the layer and the head (or their
    mean). The decoder reads the model's own greedy answer; input the model cannot read
    gets a message instead of a map."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .architecture import ATTENTION_KINDS, attention_maps
    from .decode import translate
    from .viz import plot_model_attention

    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    box = w.Text(value=text, description="date", continuous_update=False)
    kind = w.Dropdown(options=list(ATTENTION_KINDS), value="cross", description="attention")
    layer = w.Dropdown(options=[(str(i + 1), i) for i in range(n_layers)], value=n_layers - 1,
                       description="layer")
    head = w.Dropdown(options=[("mean", None)] + [(str(i + 1), i) for i in range(n_heads)],
                      value=None, description="head")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            result = translate(model, tokenizer, box.value)
            if result["error"]:
                print(f"Cannot read this input: {result['error']}")
                return
            device = next(model.parameters()).device
            src = torch.tensor([tokenizer.encode(box.value)], device=device)
            answer = tokenizer.encode(result["output"], bos=True, eos=False)
            maps = attention_maps(model, src, torch.tensor([answer], device=device))
            target = ["<bos>", *result["output"]]  # what the decoder reads
            ax = plot_model_attention(maps, kind.value, layer.value, head.value,
                                      result["source"], target)
            print(f"{box.value!r} -> {result['output']!r}")
            display(ax.figure)
            plt.close(ax.figure)

    for control in (box, kind, layer, head):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([box, kind]), w.HBox([layer, head]), out])


def complexity_explorer(d: int = 512):
    """Chapter 8: Table 1's FLOPs against ``n`` for a width ``d``, kernel ``k`` and
    window ``r`` chosen with sliders; the self-attention / recurrent crossover (n = d)
    moves with ``d``. Returns the widget box."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .viz import plot_layer_costs

    width = w.IntSlider(value=d, min=16, max=4096, step=16, description="d")
    kernel = w.IntSlider(value=3, min=3, max=31, step=2, description="kernel k")
    window = w.IntSlider(value=31, min=3, max=255, step=2, description="window r")
    n_max = w.IntSlider(value=8192, min=64, max=65536, step=64, description="largest n")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots()
            plot_layer_costs(width.value, kernel.value, window.value, n_max.value, ax=ax)
            display(fig)
            plt.close(fig)

    for control in (width, kernel, window, n_max):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([width, kernel]), w.HBox([window, n_max]), out])
