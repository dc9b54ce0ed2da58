"""Explorers that also work without a kernel: precomputed views, switched in the browser.

A live explorer redraws in Python when a control moves; a page of the HTML book has no
kernel. So each explorer also builds a *precomputed twin*: the same controls, each offering a
fixed grid of values, and one view per combination of them, drawn by the same plotting function
as the live explorer and stored (a small PNG and a caption) in the page's widget state. Each
control is linked to the views on the client with ipywidgets' ``jslink``: its ``index`` drives
the ``selected_index`` of a :class:`ipywidgets.Stack` of views, one level of stacks per control,
so moving a control switches the view in the browser, offline, with no kernel.

:func:`explorer_box` holds both: in Jupyter and Colab it displays as the live explorer, and
its display also carries the twin as ``text/html`` (a widget-view tag), which the HTML book
renders instead (``nb_mime_priority_overrides`` in ``_config.yml``). The twins are built only
when the chapters are executed for the book (``AIAYN_HTML_TWINS=1``, set by ``make notebooks``):
a reader in Jupyter or Colab gets the live explorer without waiting for views that only the
HTML shows. ``Stack`` exists from ipywidgets 8 on; under ipywidgets 7 (Colab) no twin is built
and nothing else changes.

Each view's caption carries its numbers as ``data-`` attributes of a ``span.aiayn-view``, so a
browser test can check what a setting shows against what the package computes.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Control", "grid_explorer", "grid_size", "explorer_box", "can_build_twin", "figure_png",
           "TWINS_VARIABLE", "check_index", "name_live_controls", "show_view"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@dataclass
class Control:
    """One control of a precomputed explorer: its label, the values it offers (as
    ``(label, value)`` pairs, in order), the index it starts at, and its kind: "slider"
    (a :class:`ipywidgets.SelectionSlider`), "dropdown" or "toggle" (toggle buttons)."""

    description: str
    options: Sequence[tuple[str, Any]]
    index: int = 0
    kind: str = "slider"
    width: str = field(default="")

    def __post_init__(self):
        if not self.options:
            raise ValueError(f"control {self.description!r}: options must not be empty")
        if not 0 <= self.index < len(self.options):
            raise ValueError(f"control {self.description!r}: index must be in "
                             f"[0, {len(self.options) - 1}], got {self.index}")
        if self.kind not in {"slider", "dropdown", "toggle"}:
            raise ValueError(f"control {self.description!r}: kind must be 'slider', "
                             f"'dropdown' or 'toggle', got {self.kind!r}")


def check_index(name: str, value: Any, n: int) -> int:
    """An explorer's opening setting ``value`` for the control ``name``: an int (not a bool)
    in ``[0, n - 1]``; returned unchanged, or a ValueError naming the control."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise ValueError(f"{name} must be an int in [0, {n - 1}], got {value!r}")
    return value


#: The environment variable that asks for the twins; ``make notebooks`` sets it to 1 when it
#: executes the chapters for the HTML book.
TWINS_VARIABLE = "AIAYN_HTML_TWINS"


def can_build_twin() -> bool:
    """True when the chapters are being executed for the HTML book (the environment variable
    ``AIAYN_HTML_TWINS`` is ``1``, as ``make notebooks`` sets it) and ipywidgets has
    ``Stack`` (ipywidgets 8 and later). A reader running a chapter in Jupyter or Colab sees
    only the live explorer, so the twin would be work for nothing: chapter 2's 110 views take
    about 40 seconds to draw."""
    if os.environ.get(TWINS_VARIABLE) != "1":
        return False
    try:
        import ipywidgets
    except ImportError:
        return False
    return hasattr(ipywidgets, "Stack")


def figure_png(fig, dpi: int = 60, colors: int = 64) -> bytes:
    """``fig`` as a small PNG: rendered at ``dpi``, then reduced to a palette of ``colors``
    (a view of the HTML book weighs 5 to 20 KB instead of 25 to 80)."""
    from PIL import Image

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi)
    raw.seek(0)
    small = io.BytesIO()
    Image.open(raw).convert("RGB").quantize(colors=colors).save(small, format="png",
                                                                  optimize=True)
    return small.getvalue()


def show_view(fig, text: str) -> None:
    """Display a live explorer's view (inside its ``Output``): ``fig`` as an image whose alt
    text is ``text``, and ``text`` as its caption, so that a reader who cannot see the figure
    gets what it shows for the setting just chosen (as the HTML twin's views do). ``text`` is
    the caption the twin gives the same setting. The figure is rendered as the inline backend
    would (its own dpi, a tight box), then closed, so that no redraw leaks a figure."""
    import matplotlib.pyplot as plt
    from IPython.display import HTML, display

    raw = io.BytesIO()
    fig.savefig(raw, format="png", bbox_inches="tight")
    plt.close(fig)
    source = "data:image/png;base64," + base64.b64encode(raw.getvalue()).decode("ascii")
    alt = html.escape(text)
    display(HTML(f'<figure class="aiayn-live-view" style="margin: 0">'
                 f'<img src="{source}" alt="{alt}" style="max-width: 100%">'
                 f'<figcaption>{alt}</figcaption></figure>'))


def _control_widget(control: Control):
    import ipywidgets as w

    options = [(label, i) for i, (label, _) in enumerate(control.options)]
    style = {"description_width": "initial"}
    if control.kind == "slider":
        widget = w.SelectionSlider(options=options, value=control.index, style=style,
                                   description=control.description, continuous_update=True)
    elif control.kind == "dropdown":
        widget = w.Dropdown(options=options, value=control.index, style=style,
                            description=control.description)
    else:
        widget = w.ToggleButtons(options=options, value=control.index, style=style,
                                 description=control.description)
    widget.add_class("aiayn-control")
    return widget


def _view(png: bytes, caption: str, data: dict):
    import ipywidgets as w

    attrs = " ".join(f'data-{html.escape(k)}="{html.escape(str(v))}"' for k, v in data.items())
    label = w.HTML(f'<span class="aiayn-view" {attrs}>{html.escape(caption)}</span>')
    return w.VBox([w.Image(value=png, format="png", layout=w.Layout(max_width="100%")), label])


def grid_explorer(controls: Sequence[Control], draw: Callable[..., Any],
                  caption: Callable[..., tuple[str, dict]], title: str = ""):
    """The precomputed twin of an explorer.

    ``draw(*values)`` returns a matplotlib figure for one value of each control (in the
    order of ``controls``); ``caption(*values)`` returns ``(text, data)``: a line under the
    view and the numbers it shows, exposed as ``data-`` attributes. Every combination is drawn
    once (the product of the grid sizes), the figure closed after it is stored."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    if not controls:
        raise ValueError("controls must not be empty")
    widgets = [_control_widget(c) for c in controls]
    links = []  # (control index, link): what the tests read

    def level(depth: int, chosen: tuple, indices: tuple):
        if depth == len(controls):
            fig = draw(*chosen)
            png = figure_png(fig)
            plt.close(fig)
            text, data = caption(*chosen)
            # which option of each control this view belongs to, for the browser test
            return _view(png, text, {"setting": ",".join(map(str, indices)), **data})
        control = controls[depth]
        stack = w.Stack([level(depth + 1, chosen + (value,), indices + (i,))
                         for i, (_, value) in enumerate(control.options)],
                        selected_index=control.index)
        links.append((depth, w.jslink((widgets[depth], "index"), (stack, "selected_index"))))
        return stack

    views = level(0, (), ())
    header = [w.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    box = w.VBox([*header, w.HBox(widgets, layout=w.Layout(flex_flow="row wrap")), views])
    box.add_class("aiayn-static-explorer")
    box.controls, box.links = widgets, links
    return box


def grid_size(controls: Sequence[Control]) -> int:
    """How many views a grid of ``controls`` precomputes."""
    return math.prod(len(c.options) for c in controls)


def _view_json(widget) -> dict:
    return {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}


@functools.cache
def _explorer_box_class():
    import ipywidgets as w

    class ExplorerBox(w.VBox):
        """A live explorer's box whose display also carries its precomputed twin
        (``self.twin``) as ``text/html``, for the HTML book."""

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)  # ipywidgets 8 (7 displays otherwise)
            if getattr(self, "twin", None) is not None:
                tag = json.dumps(_view_json(self.twin))
                bundle["text/html"] = f'<script type="{WIDGET_VIEW}">{tag}</script>'
            return bundle

    return ExplorerBox


# ipywidgets draws a slider's handle as an element of its own (role="slider" in ipywidgets 8,
# a jQuery UI handle in 7), apart from the label that names it, so a screen reader announces
# "slider" and nothing more. This script names each handle by its slider's label
# (aria-label), now and whenever a widget is drawn later, and gives a handle with keyboard focus
# a visible ring: the book's own JavaScript does the same for the HTML pages.
_NAME_CONTROLS_JS = """
(() => {
  if (window.aiaynNameControls) return;  // one observer per page
  const name = () => document.querySelectorAll('.widget-slider, .widget-hslider').forEach(slider => {
    const label = ((slider.querySelector('.widget-label') || {}).textContent || '').trim();
    slider.querySelectorAll('[role=slider], .ui-slider-handle').forEach(handle => {
      if (label && !handle.getAttribute('aria-label')) handle.setAttribute('aria-label', label);
    });
  });
  let pending = false;
  window.aiaynNameControls = new MutationObserver(() => {
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; name(); }); }
  });
  window.aiaynNameControls.observe(document.body, {childList: true, subtree: true});
  name();
  const ring = document.createElement('style');
  ring.textContent = '.widget-slider [role=slider]:focus-visible, .ui-slider-handle:focus-visible' +
    ' { outline: 2px solid #0b5cad; outline-offset: 2px; }';
  document.head.appendChild(ring);
})();
"""


def name_live_controls() -> None:
    """In Jupyter and Colab, name every slider handle of the live explorers by its label and
    give it a focus ring (a small script, displayed with each explorer, that
    keeps one observer per page). Not when the chapters are executed for the HTML book, whose
    pages have their own script, nor outside a kernel."""
    if os.environ.get(TWINS_VARIABLE) == "1":
        return
    try:
        from IPython import get_ipython
        from IPython.display import Javascript, display
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        display(Javascript(_NAME_CONTROLS_JS))


def explorer_box(children: Sequence, twin=None):
    """The live explorer's box (a :class:`ipywidgets.VBox` of ``children``), with ``twin``
    (from :func:`grid_explorer`, or None) in its display for the HTML book. Jupyter and
    Colab show the live box, its sliders named by their labels (:func:`name_live_controls`);
    the HTML book shows the twin."""
    name_live_controls()
    box = _explorer_box_class()(list(children))
    box.twin = twin
    return box
