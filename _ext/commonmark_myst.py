"""The chapters are written in plain CommonMark; the HTML book reads them as MyST.

Colab, Jupyter and GitHub render a notebook's markdown as CommonMark, where MyST's
roles, labels and directive fences would show as raw syntax. So the notebooks use only
CommonMark (plus invisible HTML), in a few fixed forms, and this extension turns those
forms into MyST when Sphinx reads a notebook, so the HTML keeps its cross-references,
bibliography and admonitions:

===========================================  =========================================
in the notebook (what Colab shows)           in the HTML build (MyST)
===========================================  =========================================
``<a id="sec-x"></a>`` + blank line          ``(sec-x)=``, a label for the next heading
``[text](#sec-x)``, ``[text](02_y.ipynb#sec-x)``  ``{ref}`text <sec-x>```
``[[Vaswani et al., 2017]](#cite:key1,key2)``  ``{cite}`key1,key2```
``[`Transformer`](api.md#aiayn.model.Transformer)``  ``{py:obj}`Transformer <aiayn.model.Transformer>```
``> **Note.** text`` (a block quote)          ``:::{note}`` ... ``:::``
===========================================  =========================================

Links to other pages (``[text](errata.ipynb)``) are MyST already. A number in the prose
is its literal followed by ``<!-- glue: name:fmt -->``: an HTML comment, invisible in
both, that ``scripts/prose_numbers.py`` and the tests check against the glued value.
"""

from __future__ import annotations

import json
import re

import exercise_blocks

LABEL = re.compile(r"^<a id=\"(?P<label>[\w-]+)\"></a>\n(?:[ \t]*\n)*", re.M)
CITE = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(#cite:(?P<keys>[\w,-]+)\)")
API = re.compile(r"\[`?(?P<text>[^\]`]+)`?\]\(api\.md#(?P<target>[\w.]+)\)")
REF = re.compile(r"\[(?P<text>[^\]]+)\]\((?:[\w-]+\.(?:ipynb|md))?#(?P<label>[\w-]+)\)")
NOTE = re.compile(r"^> \*\*Note\.\*\* (?P<body>.*(?:\n>.*)*)", re.M)


def _note(match: re.Match) -> str:
    lines = match["body"].split("\n")
    body = [lines[0]] + [re.sub(r"^> ?", "", line) for line in lines[1:]]
    return ":::{note}\n" + "\n".join(body) + "\n:::"


def to_myst(markdown: str) -> str:
    """One markdown cell, from the notebook's CommonMark forms to MyST."""
    markdown = LABEL.sub(lambda m: f"({m['label']})=\n", markdown)
    markdown = CITE.sub(lambda m: f"{{cite}}`{m['keys']}`", markdown)
    markdown = API.sub(lambda m: f"{{py:obj}}`{m['text']} <{m['target']}>`", markdown)
    markdown = REF.sub(lambda m: f"{{ref}}`{m['text']} <{m['label']}>`", markdown)
    return NOTE.sub(_note, markdown)


def notebook_to_myst(text: str, path: str = "") -> str:
    """A whole ``.ipynb`` file's JSON text, with every markdown cell converted (and a
    chapter's exercises and solutions made sphinx-exercise blocks: ``exercise_blocks``)."""
    notebook = json.loads(text)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            cell["source"] = to_myst(source)
    notebook["cells"] = exercise_blocks.convert(notebook["cells"], path)
    return json.dumps(notebook, ensure_ascii=False)


def _on_source_read(app, docname: str, source: list[str]) -> None:
    path = str(app.env.doc2path(docname))
    if path.endswith(".ipynb"):
        source[0] = notebook_to_myst(source[0], path)


def setup(app):
    app.connect("source-read", _on_source_read)
    app.connect("html-page-context", exercise_blocks.local_numbers)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
