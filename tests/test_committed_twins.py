"""Every explorer of a committed chapter carries its precomputed twin for the HTML book.

The twins are built only when the chapters are executed for the book
(``AIAYN_HTML_TWINS=1``, set by ``make notebooks``); a reader running a chapter in Jupyter
gets the live explorer alone. A chapter executed for commit without the variable would lose
its twins, and the HTML book its working explorers: this catches it in the unit tests,
before the browser check would."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((REPO / "book").glob("[0-9]*.ipynb"))
EXPLORER_CALL = re.compile(r"\b\w+_explorer\(")
VIEW = re.compile(r'<script type="application/vnd\.jupyter\.widget-view\+json">(\{.*?\})</script>')


def explorer_twins(notebook: dict) -> list[tuple[int, list[str]]]:
    """``(cell index, the twins' widget classes)`` for each displayed explorer: the classes of
    the widget each ``text/html`` view tag of the explorer's output names (empty when the
    output has no twin)."""
    state = notebook.get("metadata", {}).get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code" or not EXPLORER_CALL.search("".join(cell["source"])):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" not in data:
                continue
            classes = []
            for tag in VIEW.findall("".join(data.get("text/html", ""))):
                model = state.get(json.loads(tag)["model_id"], {})
                classes += model.get("state", {}).get("_dom_classes", [])
            found.append((index, classes))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_explorer_has_its_twin(path):
    twins = explorer_twins(json.loads(path.read_text()))
    missing = [index for index, classes in twins if "aiayn-static-explorer" not in classes]
    assert not missing, (f"{path.name}: explorer outputs without their HTML twin in cells "
                         f"{missing}; execute the chapter with AIAYN_HTML_TWINS=1 "
                         "(make notebooks does)")


def test_the_chapters_have_explorers():
    with_twins = [p.name for p in CHAPTERS if explorer_twins(json.loads(p.read_text()))]
    assert len(with_twins) >= 9, with_twins


def test_an_explorer_without_its_twin_is_reported():
    notebook = json.loads((REPO / "book" / "02_scaled_dot_product_attention.ipynb").read_text())
    (index, classes), = explorer_twins(notebook)
    assert "aiayn-static-explorer" in classes
    for output in notebook["cells"][index]["outputs"]:
        output.get("data", {}).pop("text/html", None)  # as executed without the variable
    assert explorer_twins(notebook) == [(index, [])]
