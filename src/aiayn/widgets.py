"""ipywidgets explorers. ipywidgets is imported lazily so ``import aiayn`` works without it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["attention_explorer"]


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
