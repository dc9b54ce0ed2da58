"""A chapter's exercises and solutions, from plain CommonMark to sphinx-exercise.

In the notebook (what Colab and Jupyter show) a chapter ends with two sections:

- ``## Exercises``: one markdown cell, a numbered list (``1. ...``, ``2. ...``);
- ``## Solutions``: for exercise N a heading cell ``### Solution N``, stored folded
  (Colab's ``collapsed_sections``, JupyterLab's ``jp-MarkdownHeadingCollapsed``), and
  then the solution's markdown and code cells, up to the next heading of level 3 or less.

For the HTML build (``commonmark_myst.notebook_to_myst`` calls :func:`convert`; a chapter
without solutions yet is left as it is), each list
item becomes an ``exercise`` directive labelled ``ex-CC-N`` (CC: the chapter's number)
that links to its solution, and each solution's cells are wrapped in ``solution-start`` /
``solution-end`` (labelled ``sol-CC-N``, class ``dropdown``: folded until clicked), which
links back to its exercise. sphinx-exercise numbers the exercises through the whole book;
:func:`local_numbers` gives the page back the chapter's own numbers, as the notebook has them.
``tests/test_exercises.py`` checks the two forms against each other.
"""

from __future__ import annotations

import re

EXERCISES = re.compile(r"^## Exercises[ \t]*\n", re.M)
ITEM = re.compile(r"^(?P<n>\d+)\. ", re.M)
SOLUTION = re.compile(r"^### Solution (?P<n>\d+)[ \t]*\n?")
HEADING = re.compile(r"^#{1,3} ")


def chapter_prefix(path: str) -> str | None:
    """``book/02_scaled_dot_product_attention.ipynb`` -> ``02`` (None for other pages)."""
    match = re.search(r"(?:^|/)(\d\d)_[^/]*\.ipynb$", path)
    return match[1] if match else None


def exercise_items(markdown: str) -> list[tuple[int, str]]:
    """The numbered items after ``## Exercises``, as (number, body without the indent)."""
    head = EXERCISES.search(markdown)
    if head is None:
        return []
    text = markdown[head.end():]
    starts = list(ITEM.finditer(text))
    items = []
    for start, end in zip(starts, starts[1:] + [None], strict=True):
        body = text[start.end(): end.start() if end else len(text)]
        # Continuation lines are indented to the item's text (three spaces for "1. ").
        indent = " " * (start.end() - start.start())
        lines = [line.removeprefix(indent) for line in body.rstrip().split("\n")]
        items.append((int(start["n"]), "\n".join(lines)))
    return items


def _exercises_to_myst(markdown: str, prefix: str) -> str:
    head = EXERCISES.search(markdown)
    blocks = [markdown[: head.end()]]
    for n, body in exercise_items(markdown):
        blocks.append(
            f"\n::::{{exercise}}\n:label: ex-{prefix}-{n}\n\n{body}\n\n"
            f"{{ref}}`Solution {n} <sol-{prefix}-{n}>`\n::::\n"
        )
    return "".join(blocks)


def _cell(source: str, n: int) -> dict:
    return {"cell_type": "markdown", "id": f"solution-end-{n}", "metadata": {}, "source": source}


def convert(cells: list[dict], path: str) -> list[dict]:
    """A chapter's cells (markdown already a string) with exercises and solutions as MyST."""
    prefix = chapter_prefix(path)
    has_solutions = any(c["cell_type"] == "markdown" and SOLUTION.match(c["source"]) for c in cells)
    if prefix is None or not has_solutions:
        return cells
    out: list[dict] = []
    open_solution = None
    for cell in cells:
        source = cell["source"] if cell["cell_type"] == "markdown" else ""
        starts = SOLUTION.match(source)
        if open_solution and (starts or HEADING.match(source)):
            out.append(_cell(":::{solution-end}\n:::", open_solution))
            open_solution = None
        if starts:
            n = starts["n"]
            cell = dict(cell, source=(
                f":::{{solution-start}} ex-{prefix}-{n}\n:label: sol-{prefix}-{n}\n"
                f":class: dropdown\n:::\n\n{source[starts.end():]}"
            ))
            open_solution = n
        elif EXERCISES.search(source):
            cell = dict(cell, source=_exercises_to_myst(source, prefix))
        out.append(cell)
    if open_solution:
        out.append(_cell(":::{solution-end}\n:::", open_solution))
    return out


# An exercise block in the HTML: its id, then its numbered caption.
HTML_EXERCISE = re.compile(
    r'id="ex-\d\d-(?P<n>\d+)">\s*<p class="admonition-title"><span class="caption-number">'
    r"Exercise (?P<book>\d+) </span>")


def local_numbers(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """sphinx-exercise numbers the exercises through the whole book ("Exercise 46" in chapter
    9), where the notebook, as Colab and Jupyter show it, numbers them per chapter. In the
    page's HTML (``html-page-context``), write every "Exercise <book number>", captions and
    links alike, with the chapter's number from the block's label ``ex-CC-N``."""
    body = context.get("body", "")
    to_local = {m["book"]: m["n"] for m in HTML_EXERCISE.finditer(body)}
    if to_local:
        numbers = "|".join(map(re.escape, to_local))
        pattern = re.compile(rf"\bExercise ({numbers})\b")
        context["body"] = pattern.sub(lambda m: f"Exercise {to_local[m[1]]}", body)
