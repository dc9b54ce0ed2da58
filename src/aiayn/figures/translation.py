"""Chapter 7's figure and explorer: a translation with its
cross-attention, and the explorer that translates the reader's own dates.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .views import Control, can_build_twin, explorer_box, grid_explorer, show_view

__all__ = [
    "plot_translation",
    "date_explorer",
    "date_twin",
    "TWIN_INPUTS",
    "TWIN_BEAMS",
    "date_caption",
]


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


def date_explorer(model, tokenizer, text: str = "Nov 29, 2026", twin: bool = True):
    """Chapter 7: type a date in any form and see the model's ISO date, the confidence
    of each character and the cross-attention. A beam-size slider switches between
    greedy decoding (1) and beam search; input the model cannot read gets a message."""
    import ipywidgets as w

    from ..learning.decode import translate

    box = w.Text(style={"description_width": "initial"}, value=text, description="date", continuous_update=False)
    beam = w.IntSlider(style={"description_width": "initial"}, value=1, min=1, max=8, description="beam size")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            result = translate(model, tokenizer, box.value, beam.value)
            if result["error"]:
                print(f"Cannot read this input: {result['error']}")
                return
            show_view(plot_translation(result), date_caption(box.value, beam.value, result)[0])

    for control in (box, beam):
        control.observe(redraw, names="value")
    redraw()
    twin = (date_twin(model, tokenizer, (text, *TWIN_INPUTS))
            if twin and can_build_twin() else None)
    return explorer_box([w.HBox([box, beam]), out], twin)


#: Inputs the HTML book offers instead of a text box, after the chapter's own (two other forms
#: of date, an impossible date and text that is no date).
TWIN_INPUTS = ("2049.12.31", "1 January 1950", "Feb 30, 2020", "hello world")
#: Beam sizes the HTML book's explorer offers, the live slider's ends among them.
TWIN_BEAMS = (1, 2, 4, 8)


def date_caption(text: str, beam: int, result: dict) -> tuple[str, dict]:
    """What a view of :func:`date_explorer` shows, in words (its alt text and caption, live
    and in the HTML twin), and the model's answer: ``result`` is
    :func:`aiayn.learning.decode.translate`'s for ``text`` at beam size ``beam``."""
    if result["error"]:
        return f"{text!r}: {result['error']}", {"output": ""}
    return f"{text!r} -> {result['output']!r} (beam {beam})", {"output": result["output"]}


def date_twin(model, tokenizer, texts: Sequence[str]):
    """The precomputed twin of :func:`date_explorer` for the HTML book: a fixed list of
    ``texts`` (duplicates dropped) and the beam sizes of :data:`TWIN_BEAMS` (the live slider's
    ends among them). An input the model cannot read shows the reason."""
    import matplotlib.pyplot as plt

    from ..learning.decode import translate

    texts = list(dict.fromkeys(texts))
    results = {(t, b): translate(model, tokenizer, t, b) for t in texts for b in TWIN_BEAMS}

    def draw(text, beam):
        result = results[(text, beam)]
        if result["error"]:
            fig, ax = plt.subplots(figsize=(6, 1.2))
            ax.axis("off")
            ax.text(0, 0.5, f"Cannot read {text!r}: {result['error']}", va="center")
            return fig
        return plot_translation(result)

    def caption(text, beam):
        return date_caption(text, beam, results[(text, beam)])

    controls = [Control("date", [(t, t) for t in texts], 0, "dropdown"),
                Control("beam size", [(str(b), b) for b in TWIN_BEAMS], 0)]
    return grid_explorer(controls, draw, caption)
