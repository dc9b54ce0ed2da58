"""Every chapter's exercises have worked solutions, folded until the reader asks for them.

The notebook's form is described in ``_ext/exercise_blocks.py``: a ``## Exercises`` list, then a
``## Solutions`` section with one ``### Solution N`` heading per exercise, stored folded for
JupyterLab and Colab (``scripts/fold_solutions.py``). The HTML form (sphinx-exercise blocks,
linked both ways) is checked on the converted notebook here and in the browser by test_html.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import commonmark_myst  # noqa: E402
import exercise_blocks  # noqa: E402

CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
# Chapters whose solutions are written so far; the rest are listed in the note.
WITH_SOLUTIONS = {"01", "02", "03", "04", "05", "06", "07", "08", "09", "10"}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fold_solutions = _load(ROOT / "scripts" / "fold_solutions.py")


def _cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    for cell in cells:
        cell["source"] = "".join(cell["source"])
    return cells


def exercises_and_solutions(path: Path) -> tuple[list[int], list[int]]:
    """The exercise numbers of the chapter's list and the numbers of its solution headings."""
    cells = _cells(path)
    listed = [c for c in cells if c["cell_type"] == "markdown" and "## Exercises" in c["source"]]
    assert len(listed) == 1, f"{path.name}: {len(listed)} '## Exercises' cells, expected one"
    exercises = [n for n, _ in exercise_blocks.exercise_items(listed[0]["source"])]
    solutions = [int(m[1]) for c in cells if c["cell_type"] == "markdown"
                 for m in [re.match(r"### Solution (\d+)\s*$", c["source"].split("\n")[0])] if m]
    return exercises, solutions


def matching_problems(exercises: list[int], solutions: list[int]) -> list[str]:
    problems = []
    if exercises != list(range(1, len(exercises) + 1)):
        problems.append(f"the exercises are numbered {exercises}, not 1 to {len(exercises)}")
    problems += [f"exercise {n} has no solution" for n in exercises if n not in solutions]
    problems += [f"solution {n} points at no exercise" for n in solutions if n not in exercises]
    problems += [f"solution {n} appears {solutions.count(n)} times"
                 for n in sorted(set(solutions)) if solutions.count(n) > 1]
    if solutions != sorted(solutions):
        problems.append(f"the solutions are out of order: {solutions}")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_exercise_has_one_solution_and_every_solution_an_exercise(path):
    exercises, solutions = exercises_and_solutions(path)
    assert exercises, f"{path.name}: no exercises"
    if path.name[:2] not in WITH_SOLUTIONS:
        pytest.skip(f"{path.name}: solutions not written yet ({len(exercises)} exercises)")
    assert not matching_problems(exercises, solutions), matching_problems(exercises, solutions)


def test_the_count_fails_on_a_missing_or_stray_solution():
    assert matching_problems([1, 2, 3], [1, 2, 3]) == []
    assert matching_problems([1, 2, 3], [1, 3]) == ["exercise 2 has no solution"]
    assert matching_problems([1, 2], [1, 2, 4]) == ["solution 4 points at no exercise"]
    assert matching_problems([1, 2], [1, 2, 2]) == ["solution 2 appears 2 times"]


@pytest.mark.parametrize("path", [p for p in CHAPTERS if p.name[:2] in WITH_SOLUTIONS],
                         ids=lambda p: p.name)
def test_solutions_come_last_and_are_stored_folded(path):
    cells = _cells(path)
    start = next(i for i, c in enumerate(cells) if c["source"].startswith("## Solutions"))
    assert all(not c["source"].startswith("## ") for c in cells[start + 1:]), \
        "the Solutions section must be the chapter's last"
    assert "## Exercises" in cells[start - 1]["source"], "Solutions must follow the Exercises"
    headings = [c for c in cells[start:] if re.match(r"### Solution \d+", c["source"])]
    notebook = json.loads(path.read_text())
    assert notebook["metadata"]["colab"]["collapsed_sections"] == [c["id"] for c in headings]
    for cell in headings:
        # The heading cell holds the heading alone: a folded heading still shows its own cell.
        assert re.fullmatch(r"### Solution \d+\s*", cell["source"]), cell["source"][:80]
        assert cell["metadata"].get("jp-MarkdownHeadingCollapsed") is True, cell["source"][:40]
        assert cell["metadata"].get("id") == cell["id"]
    # Every cell of a solution sits under its heading: no other heading in between.
    for cell in cells[start + 1:]:
        if cell["cell_type"] == "markdown" and re.match(r"#{1,3} ", cell["source"]):
            assert re.match(r"### Solution \d+\s*$", cell["source"].split("\n")[0]), cell["source"][:60]


@pytest.mark.parametrize("path", [p for p in CHAPTERS if p.name[:2] in WITH_SOLUTIONS],
                         ids=lambda p: p.name)
def test_the_html_gets_linked_exercise_and_solution_blocks(path):
    cc = path.name[:2]
    converted = json.loads(commonmark_myst.notebook_to_myst(path.read_text(), str(path)))
    text = "\n".join(c["source"] for c in converted["cells"] if c["cell_type"] == "markdown")
    exercises, _ = exercises_and_solutions(path)
    for n in exercises:
        assert f"::::{{exercise}}\n:label: ex-{cc}-{n}\n" in text
        assert f"{{ref}}`Solution {n} <sol-{cc}-{n}>`" in text  # exercise -> solution
        assert f":::{{solution-start}} ex-{cc}-{n}\n:label: sol-{cc}-{n}\n:class: dropdown" in text
    assert text.count(":::{solution-end}") == len(exercises)
    assert "### Solution" not in text


def test_the_fold_script_folds_a_copy(tmp_path):
    import nbformat
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("## Exercises\n\n1. Try."),
                      nbformat.v4.new_markdown_cell("## Solutions"),
                      nbformat.v4.new_markdown_cell("### Solution 1"),
                      nbformat.v4.new_code_cell("print(1)")]
    path = tmp_path / "01_x.ipynb"
    nbformat.write(notebook, path)
    assert fold_solutions.fold(str(path)) == 1
    folded = nbformat.read(path, as_version=4)
    assert folded.cells[2].metadata["jp-MarkdownHeadingCollapsed"] is True
    assert folded.metadata.colab.collapsed_sections == [folded.cells[2].id]


def test_the_html_numbers_exercises_per_chapter():
    # sphinx-exercise counts through the book; the page shows the chapter's numbers, as the notebook.
    body = ('<div class="exercise admonition" id="ex-09-3">\n\n<p class="admonition-title">'
            '<span class="caption-number">Exercise 48 </span></p>\n'
            '<a href="#sol-09-3"><span class="std std-ref">Solution to Exercise 48</span></a>\n'
            '<p class="admonition-title">Solution to<a href="#ex-09-3"> Exercise 48</a></p>\n'
            '<p>Exercise 480 and Exercise 4 are other numbers.</p>')
    context = {"body": body}
    exercise_blocks.local_numbers(None, "book/09", "page.html", context, None)
    assert context["body"].count("Exercise 3 ") == 1 and context["body"].count("Exercise 3<") == 2
    assert "Exercise 48 " not in context["body"] and "Exercise 480 and Exercise 4 " in context["body"]
    untouched = {"body": "<p>No exercise here: Exercise 48.</p>"}
    exercise_blocks.local_numbers(None, "intro", "page.html", untouched, None)
    assert untouched["body"] == "<p>No exercise here: Exercise 48.</p>"
