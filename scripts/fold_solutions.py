"""Store each chapter's solutions folded, so that no solution is on screen until asked for.

A solution starts at a heading cell ``### Solution N`` (``_ext/exercise_blocks.py``). Folded:

- in JupyterLab, the heading cell's metadata ``jp-MarkdownHeadingCollapsed: true`` (a collapsed
  heading hides every cell up to the next heading of its level or above);
- in Colab, the notebook's ``metadata.colab.collapsed_sections``, which lists the heading cells
  by the ``metadata.id`` Colab gives cells (set here to the cell's own id).

``make notebooks`` runs it after executing the chapters; ``tests/test_exercises.py`` checks it.

    python scripts/fold_solutions.py book/*.ipynb
"""

from __future__ import annotations

import re
import sys

import nbformat

SOLUTION = re.compile(r"^### Solution \d+\s*$", re.M)


def solution_headings(notebook) -> list:
    return [cell for cell in notebook.cells
            if cell.cell_type == "markdown" and SOLUTION.match(cell.source)]


def fold(path: str) -> int:
    notebook = nbformat.read(path, as_version=4)
    headings = solution_headings(notebook)
    for cell in headings:
        cell.metadata["jp-MarkdownHeadingCollapsed"] = True
        cell.metadata["id"] = cell.id
    colab = notebook.metadata.setdefault("colab", {})
    colab["collapsed_sections"] = [cell.id for cell in headings]
    if not headings:
        colab.pop("collapsed_sections")
    nbformat.write(notebook, path)
    return len(headings)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(f"{path}: {fold(path)} solutions folded")
