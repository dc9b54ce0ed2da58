"""aiayn.figures.views and every explorer's precomputed twin (the HTML book's explorers).

For each twin, on small inputs: one view per combination of the controls' options, each view
tagged with its setting, every level of stacks linked on the client to its control, the
numbers of a view's caption equal to what the package computes, and the explorer's display
carrying the twin for the HTML (and no twin where ipywidgets has no Stack, as in Colab).
"""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
import torch

w = pytest.importorskip("ipywidgets")
if not hasattr(w, "Stack"):
    pytest.skip("the twins need ipywidgets 8 (Stack)", allow_module_level=True)

from aiayn import Transformer, scaled_dot_product_attention, sinusoidal_encoding  # noqa: E402
from aiayn.figures.views import Control, explorer_box, grid_explorer, grid_size  # noqa: E402

VIEW = re.compile(r'<span class="aiayn-view" (?P<attrs>[^>]*)>(?P<text>[^<]*)</span>')


def views(twin) -> dict[tuple[int, ...], dict]:
    """{setting (an option index per control): the view's data attributes}, read from the
    widgets exactly as the page's HTML will hold them."""
    found = {}

    def walk(widget):
        if isinstance(widget, w.HTML) and "aiayn-view" in widget.value:
            match = VIEW.search(widget.value)
            attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', match["attrs"]))
            setting = tuple(int(i) for i in attrs.pop("setting").split(","))
            assert setting not in found, f"two views for the setting {setting}"
            found[setting] = attrs | {"text": match["text"]}
        for child in getattr(widget, "children", ()):
            walk(child)

    walk(twin)
    return found


def check_grid(twin, sizes: list[int]) -> dict:
    """Every combination has its view, and every stack follows its control."""
    found = views(twin)
    assert sorted(found) == list(itertools.product(*[range(n) for n in sizes]))
    assert len(twin.controls) == len(sizes)
    for depth, n in enumerate(sizes):
        linked = [link for d, link in twin.links if d == depth]
        assert len(linked) == math.prod(sizes[:depth])  # one stack per choice above it
        for link in linked:
            assert link.source == (twin.controls[depth], "index")
            assert link.target[1] == "selected_index" and isinstance(link.target[0], w.Stack)
            assert len(link.target[0].children) == n
    images = [c for c in _all(twin) if isinstance(c, w.Image)]
    assert len(images) == math.prod(sizes) and all(i.value[:4] == b"\x89PNG" for i in images)
    return found


def _all(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _all(child)


# ------------------------------------------------------------------------ the machinery


def test_grid_explorer_builds_one_view_per_combination_and_links_each_level():
    import matplotlib.pyplot as plt

    drawn = []

    def draw(a, b):
        drawn.append((a, b))
        fig, ax = plt.subplots(figsize=(1, 1))
        ax.plot([0, a], [0, b])
        return fig

    controls = [Control("a", [("1", 1), ("2", 2), ("3", 3)], 1),
                Control("b", [("x", 10), ("y", 20)], 0, "toggle")]
    twin = grid_explorer(controls, draw, lambda a, b: (f"{a}-{b}", {"sum": a + b}))
    found = check_grid(twin, [3, 2])
    assert sorted(drawn) == [(a, b) for a in (1, 2, 3) for b in (10, 20)]
    assert found[(2, 1)] == {"sum": "23", "text": "3-20"}
    assert twin.controls[0].index == 1 and twin.controls[1].index == 0  # the starting values
    assert grid_size(controls) == 6
    assert plt.get_fignums() == []  # every figure closed once stored


def test_controls_refuse_bad_definitions():
    with pytest.raises(ValueError, match="options must not be empty"):
        Control("a", [])
    with pytest.raises(ValueError, match="index must be in"):
        Control("a", [("x", 1)], 1)
    with pytest.raises(ValueError, match="kind must be"):
        Control("a", [("x", 1)], 0, "knob")
    with pytest.raises(ValueError, match="controls must not be empty"):
        grid_explorer([], lambda: None, lambda: ("", {}))


def test_the_display_carries_the_twin_for_the_html_only_when_there_is_one():
    twin = w.VBox([])
    with_twin = explorer_box([w.HTML("live")], twin).__class__
    box = with_twin([w.HTML("live")])
    box.twin = twin
    bundle = box._repr_mimebundle_()
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == box.model_id  # Jupyter and Colab: the live explorer
    assert json.loads(re.search(r">(.*)</script>", bundle["text/html"])[1])["model_id"] == \
        twin.model_id  # the HTML book: the twin
    assert "text/html" not in explorer_box([w.HTML("live")], None)._repr_mimebundle_()


@pytest.fixture(autouse=True)
def _html_twins(monkeypatch):
    """As when the chapters are executed for the HTML book (`make notebooks`)."""
    monkeypatch.setenv("AIAYN_HTML_TWINS", "1")


@pytest.fixture
def unrendered(monkeypatch):
    """Views drawn but not rendered to PNG (a stand-in PNG instead), for the tests that read
    only which view a twin opens on: rendering is most of a twin's cost (ch8: 0.65 s a view),
    and the tests above check every twin's PNGs."""
    from aiayn.figures import views as views_module

    stand_in = b"\x89PNG stand-in"
    monkeypatch.setattr(views_module, "figure_png", lambda fig, **kwargs: stand_in)
    return stand_in


@pytest.mark.parametrize("value", [None, "0", ""])
def test_outside_the_book_build_no_twin_is_built(monkeypatch, value):
    import ipywidgets

    import aiayn.figures.attention as attention
    from aiayn.figures.views import can_build_twin

    assert hasattr(ipywidgets, "Stack") and can_build_twin()  # the variable is 1 here
    if value is None:
        monkeypatch.delenv("AIAYN_HTML_TWINS")
    else:
        monkeypatch.setenv("AIAYN_HTML_TWINS", value)
    assert not can_build_twin()  # a reader in Jupyter: the live explorer only
    x = torch.randn(2, 4)
    box = attention.attention_explorer(["a", "b"], x, x, x)
    assert box.twin is None and "text/html" not in box._repr_mimebundle_()


def test_without_stack_no_twin_is_built(monkeypatch):
    import aiayn.figures.attention as attention

    monkeypatch.setattr(attention, "can_build_twin", lambda: False)  # as under ipywidgets 7
    tokens = ["a", "b"]
    x = torch.randn(2, 4)
    box = attention.attention_explorer(tokens, x, x, x)
    assert box.twin is None and "text/html" not in box._repr_mimebundle_()


# -------------------------------------------------------------------- the chapters' twins


def test_chapter2_twin_weights_are_the_packages():
    from aiayn.figures.attention import TWIN_TEMPERATURES, attention_explorer

    tokens = ["it", "was", "tired"]
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    box = attention_explorer(tokens, x, x, x)
    found = check_grid(box.twin, [3, len(TWIN_TEMPERATURES), 2])
    # query "tired", temperature 0.01, causal mask on
    weights = [float(v) for v in found[(2, 0, 1)]["weights"].split(",")]
    _, expected = scaled_dot_product_attention(
        x, x, x, torch.ones(3, 3).tril().bool(), scale=1 / (math.sqrt(8) * 0.01))
    assert weights == pytest.approx(expected[2].tolist(), abs=1e-4)
    assert sum(weights) == pytest.approx(1, abs=1e-3)


def test_chapter1_twin_reports_the_measured_decay():
    from aiayn.experiments.recurrence import gradient_decay
    from aiayn.figures.recurrence import TWIN_LENGTHS, TWIN_RADII, gradient_decay_twin

    twin = gradient_decay_twin(d_model=8)
    found = check_grid(twin, [len(TWIN_RADII), len(TWIN_LENGTHS)])
    r, n = TWIN_RADII.index(1.5), TWIN_LENGTHS.index(10)
    expected = float(gradient_decay(1.5, 10, 8, 0.1, seed=0)[-1]) / math.log(10)
    assert float(found[(r, n)]["log10-far"]) == pytest.approx(expected, abs=1e-4)


def test_chapter3_twin_reports_the_scores_spread():
    from aiayn.figures.variance import scaling_twin

    found = check_grid(scaling_twin(n_keys=4), [11, 2])
    # scaled: about 1 at every d_k; unscaled: about sqrt(d_k)
    assert float(found[(10, 0)]["std"]) == pytest.approx(1.0, abs=0.1)
    assert float(found[(10, 1)]["std"]) == pytest.approx(math.sqrt(1024), rel=0.1)


def test_chapter5_twin_values_are_the_table():
    from aiayn.figures.positions import positional_twin

    twin = positional_twin(d_model=8, n_positions=12)
    found = check_grid(twin, [4, 3])  # positions 0, 1, 10, 11; dimensions 0, 1, 7
    table = sinusoidal_encoding(12, 8)
    assert float(found[(2, 1)]["pe"]) == pytest.approx(float(table[10, 1]), abs=1e-6)
    assert float(found[(3, 2)]["pe"]) == pytest.approx(float(table[11, 7]), abs=1e-6)


def test_chapter8_twin_crossover_is_n_equals_d():
    from aiayn.experiments.costs import crossover_length
    from aiayn.figures.costs import complexity_twin

    found = check_grid(complexity_twin(d=64), [3, 2, 2, 3])
    assert float(found[(1, 0, 0, 0)]["crossover"]) == pytest.approx(crossover_length(64))
    assert float(found[(2, 0, 0, 0)]["crossover"]) == pytest.approx(crossover_length(4096))


def test_chapter4_twin_covers_every_head_of_every_model():
    from aiayn.figures.heads import head_twin

    torch.manual_seed(0)
    maps = {"a": torch.softmax(torch.randn(2, 2, 3, 4, 4), -1),  # (L, N, H, T, T)
            "b": torch.softmax(torch.randn(1, 2, 2, 4, 4), -1)}
    labels = [list("wxyz"), list("abcd")]
    twin = head_twin(maps, labels)
    found = check_grid(twin, [2 * 3 + 1 * 2, 2])
    # the last head of the menu is model b, layer 0, head 1; input 1
    expected = maps["b"][0, 1, 1].max(-1).values.mean()
    assert float(found[(7, 1)]["mean-top"]) == pytest.approx(float(expected), abs=1e-4)


def _tiny_date_model():
    from aiayn.learning.data import date_tokenizer
    from aiayn.learning.recipes import date_config

    tokenizer = date_tokenizer()
    torch.manual_seed(0)
    config = date_config(tokenizer, n_layers=1, d_model=16, n_heads=2, d_ff=32)
    return Transformer(config).eval(), tokenizer


def test_chapter6_twin_offers_fixed_inputs_and_explains_the_unreadable():
    from aiayn.figures.encoder_decoder import encoder_decoder_twin
    from aiayn.learning.decode import translate

    model, tokenizer = _tiny_date_model()
    texts = ["Nov 29, 2026", "hello \u2603", "Nov 29, 2026"]  # a snowman: not in the vocabulary
    twin = encoder_decoder_twin(model, tokenizer, texts)
    found = check_grid(twin, [2, 3, 1, 3])  # duplicates dropped; mean + 2 heads
    assert found[(0, 2, 0, 0)]["output"] == translate(model, tokenizer, "Nov 29, 2026")["output"]
    unreadable = found[(1, 0, 0, 0)]
    assert unreadable["output"] == "" and "not in the vocabulary" in unreadable["text"]


def test_chapter7_twin_decodes_every_input_at_every_beam():
    from aiayn.figures.translation import TWIN_BEAMS, date_twin
    from aiayn.learning.decode import translate

    model, tokenizer = _tiny_date_model()
    found = check_grid(date_twin(model, tokenizer, ["Nov 29, 2026", "hello world"]),
                       [2, len(TWIN_BEAMS)])
    beam = TWIN_BEAMS.index(4)
    assert found[(0, beam)]["output"] == translate(model, tokenizer, "Nov 29, 2026", 4)["output"]
    assert TWIN_BEAMS[0] == 1 and TWIN_BEAMS[-1] == 8  # both ends of the live slider


# ------------------------------------------------- opening settings (live = twin)


def shown(twin) -> tuple[tuple[int, ...], dict]:
    """The controls' opening indices, and the attributes of the view the page shows first
    (following every level's ``selected_index``); the two must name the same setting."""
    node = twin.children[-1]
    while isinstance(node, w.Stack):
        node = node.children[node.selected_index]
    match = VIEW.search(node.children[1].value)
    attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', match["attrs"]))
    setting = tuple(int(i) for i in attrs.pop("setting").split(","))
    assert setting == tuple(c.index for c in twin.controls)
    return setting, attrs


def test_chapter3_opens_on_the_chosen_d_k_and_scaling(unrendered):
    from aiayn.figures.variance import SCALING_D_KS, scaling_explorer, scaling_twin

    twin = scaling_twin(n_keys=4, d_k=64, scaled=False)
    setting, attrs = shown(twin)
    assert setting == (SCALING_D_KS.index(64), 1)
    assert float(attrs["std"]) == pytest.approx(8.0, rel=0.1)  # unscaled: sqrt(64)
    assert shown(scaling_twin(n_keys=4))[0] == (SCALING_D_KS.index(64), 0)  # the default
    box = scaling_explorer(n_keys=4, d_k=1024, scaled=False)
    d_k, scaled = box.children[0].children
    assert (d_k.value, scaled.value) == (1024, False)
    assert shown(box.twin)[0] == (SCALING_D_KS.index(1024), 1)
    for bad in (dict(d_k=100), dict(d_k=True), dict(scaled="no")):
        name = next(iter(bad))
        with pytest.raises(ValueError, match=f"{name} must be"):
            scaling_twin(n_keys=4, **bad)


def test_chapter4_opens_on_the_chosen_head_and_input(unrendered):
    from aiayn.figures.heads import head_twin

    torch.manual_seed(0)
    maps = {"a": torch.softmax(torch.randn(2, 2, 3, 4, 4), -1),  # (L, N, H, T, T)
            "b": torch.softmax(torch.randn(1, 2, 2, 4, 4), -1)}
    labels = [list("wxyz"), list("abcd")]
    setting, attrs = shown(head_twin(maps, labels, model="a", layer=1, head=2, example=1))
    assert setting == (1 * 3 + 2, 1)  # the menu lists a's heads layer by layer, then b's
    expected = maps["a"][1, 1, 2].max(-1).values.mean()
    assert float(attrs["mean-top"]) == pytest.approx(float(expected), abs=1e-4)
    assert shown(head_twin(maps, labels, model="b", head=1))[0] == (7, 0)
    assert shown(head_twin(maps, labels))[0] == (0, 0)  # the default: the first head
    for bad, name in ((dict(model="c"), "model"), (dict(model="b", head=2), "head"),
                      (dict(layer=2), "layer"), (dict(example=2), "example")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            head_twin(maps, labels, **bad)


def test_chapter5_opens_on_the_chosen_position_and_dimension(unrendered):
    from aiayn.figures.positions import positional_explorer, positional_twin, positional_twin_grid

    assert positional_twin_grid(8, 12) == ([0, 1, 10, 11], [0, 1, 7])
    setting, attrs = shown(positional_twin(d_model=8, n_positions=12, position=1, dimension=7))
    assert setting == (1, 2)
    assert float(attrs["pe"]) == pytest.approx(float(sinusoidal_encoding(12, 8)[1, 7]), abs=1e-6)
    assert shown(positional_twin(d_model=8, n_positions=12))[0] == (2, 0)  # default: 10, 0
    box = positional_explorer(d_model=8, n_positions=12, position=11, dimension=1)
    position, dimension = box.children[0].children
    assert (position.value, dimension.value) == (11, 1)
    assert shown(box.twin)[0] == (3, 1)
    with pytest.raises(ValueError, match=r"position must be one of the HTML grid's \[0, 1, 10, 11\]"):
        positional_twin(d_model=8, n_positions=12, position=5)
    with pytest.raises(ValueError, match="dimension must be an int in"):
        positional_twin(d_model=8, n_positions=12, dimension=8)
    with pytest.raises(ValueError, match="n_positions must be a positive int"):
        positional_twin_grid(8, 0)


def test_chapter8_opens_on_the_chosen_setting_and_its_grid_holds_it(unrendered):
    from aiayn.figures.costs import complexity_explorer, complexity_twin, complexity_twin_grid

    assert complexity_twin_grid(64, 5, 255, 128) == {
        "d": [16, 64, 4096], "k": [3, 5, 31], "r": [3, 255], "n_max": [64, 128, 65536]}
    setting, attrs = shown(complexity_twin(d=64, k=5, r=255, n_max=128))
    assert setting == (1, 1, 1, 1)
    assert float(attrs["crossover"]) == 64
    assert shown(complexity_twin(d=64))[0] == (1, 0, 1, 1)  # the default: r = 255
    # the live explorer's default window (31) is on its twin's grid, and both open on it
    box = complexity_explorer(d=64)
    assert box.children[1].children[0].value == 31
    assert [c.index for c in box.twin.controls] == [1, 0, 1, 1]
    assert box.twin.controls[2].options[1] == ("31", 1)
    for bad, name in ((dict(r=32), "r"), (dict(k=33), "k"), (dict(d=8), "d"),
                      (dict(n_max=100), "n_max")):
        with pytest.raises(ValueError, match=f"{name} must be an int in"):
            complexity_twin(**bad)

