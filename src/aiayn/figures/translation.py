"""Chapter 7's figure and explorer: a translation with its
cross-attention, and the explorer that translates the reader's own dates.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_translation", "date_explorer"]


def plot_translation(result: dict, title: str | None = None) -> plt.Figure:
    """Chapter 7: a translation from :func:`aiayn.learning.decode.translate`: the confidence of each
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


def date_explorer(model, tokenizer, text: str = "Nov 29, 2026"):
    """Chapter 7: type a date in any form and see the model's ISO date, the confidence
    of each character and the cross-attention. A beam-size slider switches between
    greedy decoding (1) and beam search; input the model cannot read gets a message."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from ..learning.decode import translate

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
