"""The live explorers describe their view: each redraw gives the figure, as its alt text and
its caption, the words the HTML twin's view of the same setting has (``show_view``).

Run under the newest ipywidgets by ``make unit`` and under Colab's ipywidgets 7 by
tests/test_colab_like.py (no twin is built here, so nothing needs ``Stack``).
"""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("ipywidgets")

from aiayn import Transformer, sinusoidal_encoding  # noqa: E402


def _tiny_date_model():
    from aiayn.learning.data import date_tokenizer
    from aiayn.learning.recipes import date_config

    tokenizer = date_tokenizer()
    torch.manual_seed(0)
    config = date_config(tokenizer, n_layers=1, d_model=16, n_heads=2, d_ff=32)
    return Transformer(config).eval(), tokenizer



def test_show_view_gives_the_image_its_caption_as_alt_text(monkeypatch):
    import IPython.display
    import matplotlib.pyplot as plt

    from aiayn.figures.views import show_view

    shown_now = []
    monkeypatch.setattr(IPython.display, "display", shown_now.append)
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    show_view(fig, "query 'it': most weight on <animal> & more")
    (output,) = shown_now
    escaped = "query &#x27;it&#x27;: most weight on &lt;animal&gt; &amp; more"
    assert re.search(rf'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="{escaped}"',
                     output.data), output.data[:300]
    assert f"<figcaption>{escaped}</figcaption>" in output.data
    assert not plt.fignum_exists(fig.number)  # closed: no redraw leaks a figure


@pytest.fixture
def described(monkeypatch):
    """Record what each live explorer's redraw passes to show_view: (figure, text)."""
    import matplotlib.pyplot as plt

    import aiayn.figures.views

    texts = []

    def record(fig, text):
        plt.close(fig)
        texts.append(text)

    monkeypatch.setattr(aiayn.figures.views, "show_view", record)
    for module in ("attention", "costs", "encoder_decoder", "heads", "positions", "recurrence",
                   "trained_heads", "translation", "variance"):
        monkeypatch.setattr(f"aiayn.figures.{module}.show_view", record)
    return texts


def test_live_views_are_described_by_the_twins_captions(described):
    """Each live explorer's view gets, as its text alternative, the caption its twin gives
    the same setting; moving a control changes it."""
    from aiayn.figures.attention import attention_caption, attention_explorer
    from aiayn.figures.costs import complexity_caption, complexity_explorer
    from aiayn.figures.positions import positional_caption, positional_explorer
    from aiayn.figures.recurrence import gradient_decay_caption, gradient_decay_explorer
    from aiayn.figures.variance import scaling_caption, scaling_explorer

    q = k = v = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    tokens = ["the", "cat", "sat", "down"]
    box = attention_explorer(tokens, q, k, v, twin=False)
    pick, temperature, causal = box.children[0].children
    pick.value = 2
    assert described[-2:] == [attention_caption(tokens, q, k, v, i, 1.0, False)[0]
                              for i in (0, 2)]
    assert described[-1] != described[-2]

    box = gradient_decay_explorer(d_model=8, twin=False)
    radius, length = box.children[0].children
    radius.value = 1.5
    assert described[-1] == gradient_decay_caption(1.5, 100, 8)[0]

    box = positional_explorer(d_model=16, n_positions=20, twin=False)
    position, dimension = box.children[0].children
    position.value, dimension.value = 3, 5
    table = sinusoidal_encoding(20, 16)
    assert described[-1] == positional_caption(table, 3, 5)[0] == (
        f"PE[3, 5] = {float(table[3, 5]):.4f}")

    box = scaling_explorer(n_keys=4, twin=False)
    width, divide = box.children[0].children
    divide.value = False
    assert described[-1] == scaling_caption(64, False, 4)[0]

    box = complexity_explorer(d=64, twin=False)
    width, kernel = box.children[0].children
    width.value = 128
    assert described[-1] == complexity_caption(128, 3, 31, 8192)[0]
    assert "n = 128" in described[-1]
    kernel.value = 9  # the kernel changes the convolution's curve: the words say so
    assert described[-1] == complexity_caption(128, 9, 31, 8192)[0] != described[-2]


def test_live_date_views_name_the_map_and_the_answer(described):
    from aiayn.figures.encoder_decoder import encoder_decoder_explorer
    from aiayn.figures.translation import date_explorer
    from aiayn.learning.decode import translate

    model, tokenizer = _tiny_date_model()
    answer = translate(model, tokenizer, "Nov 29, 2026")["output"]
    box = encoder_decoder_explorer(model, tokenizer, "Nov 29, 2026", twin=False)
    assert described[-1] == f"cross attention, layer 1, mean of the heads: 'Nov 29, 2026' -> {answer!r}"
    layer, head = box.children[1].children
    head.value = 1
    assert described[-1].startswith("cross attention, layer 1, head 2: ")
    box = date_explorer(model, tokenizer, "Nov 29, 2026", twin=False)
    text, beam = box.children[0].children
    beam.value = 4
    four = translate(model, tokenizer, "Nov 29, 2026", 4)["output"]
    assert described[-1] == f"'Nov 29, 2026' -> {four!r} (beam 4)"


def test_live_head_views_are_described_by_the_twins_captions(described):
    from aiayn.experiments.heads import TinyEncoder
    from aiayn.figures.heads import head_caption, head_explorer

    torch.manual_seed(0)
    model = TinyEncoder(16, 16, d_model=16, n_heads=2, n_layers=2, d_ff=16, max_len=8)
    tokens = torch.randint(0, 16, (3, 6), generator=torch.Generator().manual_seed(1))
    box = head_explorer({"tiny": model}, tokens, [list("abcdef")] * 3, twin=False)
    (_, layer, head), example = box.children[0].children, box.children[1]
    layer.value, head.value, example.value = 1, 1, 2
    maps = {"tiny": model.attention_maps(tokens).cpu()}  # (L, N, H, T, T)
    assert described[-1] == head_caption(maps, "tiny", 1, 1, 2)[0]
    assert described[-1].startswith("tiny, layer 1, head 1, input 2: mean top weight ")


def test_live_trained_views_are_described_by_the_twins_captions(described):
    from aiayn.figures.trained_heads import (
        _sentence_maps,
        trained_attention_explorer,
        trained_caption,
    )
    from aiayn.pretrained import load_minilm, load_tokenizer

    model, tokenizer = load_minilm(), load_tokenizer()
    box = trained_attention_explorer(model, tokenizer, ["Cats sleep."], twin=False)
    layer, head = box.children[1].children
    layer.value, head.value = 3, 7
    assert described[-1] == trained_caption(*_sentence_maps(model, tokenizer, "Cats sleep."),
                                            3, 7)[0]
    assert described[-1].startswith("layer 3, head 7: ")
