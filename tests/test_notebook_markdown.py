"""The chapters' prose reads right where it is read, and its numbers are their cells'.

Colab, Jupyter and GitHub render a notebook's markdown as plain CommonMark. These
tests render every markdown cell the same way (``markdown-it-py`` in CommonMark mode,
no MyST plugins) and fail on any MyST syntax a reader would see there. They also check
that every number in the prose is the value its cell computes
(``scripts/prose_numbers.py``), and that ``_ext/commonmark_myst.py`` gives the HTML
build back its cross-references, citations and notes. Each check is also run on a
planted example, to show that it can fail.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


prose_numbers = _load("prose_numbers", ROOT / "scripts" / "prose_numbers.py")
sys.path.insert(0, str(ROOT / "_ext"))  # as Sphinx's local_extensions does
commonmark_myst = _load("commonmark_myst", ROOT / "_ext" / "commonmark_myst.py")

COMMONMARK = MarkdownIt("commonmark")
ROLE = re.compile(r"\{[a-zA-Z][\w:.-]*\}$")  # the "{role}" that precedes a `target`
LABEL_LINE = re.compile(r"^\([\w:.-]+\)=\s*$", re.M)
COLON_FENCE = re.compile(r"^:{3,}\s*(\{|$)", re.M)
SUBSTITUTION = re.compile(r"\{\{.*?\}\}")


def myst_residue(markdown: str) -> list[str]:
    """The MyST syntax that a CommonMark renderer would show as text."""
    found = []
    tokens = COMMONMARK.parse(markdown)
    for token in tokens:
        if token.type == "fence" and token.info.strip().startswith("{"):
            found.append(f"directive fence ```{token.info.strip()}")
        if token.type != "inline":
            continue
        children = token.children or []
        text = "".join(c.content if c.type == "text" else "\n" if "break" in c.type else " "
                       for c in children)
        for before, after in itertools.pairwise(children):
            if before.type == "text" and after.type == "code_inline" and ROLE.search(before.content):
                found.append(f"role {ROLE.search(before.content).group(0)}`{after.content}`")
        found += [f"label line {m.group(0)!r}" for m in LABEL_LINE.finditer(text)]
        found += [f"colon fence {m.group(0)!r}" for m in COLON_FENCE.finditer(text)]
        found += [f"substitution {m.group(0)!r}" for m in SUBSTITUTION.finditer(text)]
        found += [f"MyST comment {line!r}" for line in text.split("\n") if line.startswith("% ")]
    return found


def _markdown(path: Path) -> list[tuple[int, str]]:
    return prose_numbers.markdown_cells(json.loads(path.read_text()))


# ---------------------------------------------------------------- no MyST residue


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_commonmark_rendering_shows_no_myst_syntax(path):
    problems = [f"cell {i}: {r}" for i, source in _markdown(path) for r in myst_residue(source)]
    assert not problems, f"{path.name} shows MyST syntax in Colab/Jupyter:\n" + "\n".join(problems)


@pytest.mark.parametrize("planted, kind", [
    ("The weight is {glue:text}`soft_lookup:.2f`.", "role"),
    ("See {ref}`the example <sec-worked-example>`.", "role"),
    ("As shown {cite}`vaswani2017attention`.", "role"),
    ("(sec-worked-example)=\n## A worked example", "label line"),
    (":::{note}\nA note.\n:::", "colon fence"),
    ("```{note}\nA note.\n```", "directive fence"),
    ("The value {{ answer }} is here.", "substitution"),
    ("% a MyST comment\nText.", "MyST comment"),
])
def test_residue_check_catches_planted_myst(planted, kind):
    found = myst_residue(planted)
    assert found and found[0].startswith(kind), (planted, found)


def test_residue_check_accepts_the_commonmark_forms():
    clean = ("<a id=\"sec-x\"></a>\n\n## Title\n\nIt is 0.81<!-- glue: w:.2f -->, see\n"
             "[the example](#sec-x) and [[Vaswani et al., 2017]](#cite:vaswani2017attention), "
             "code `{glue:text}` quoted, math $\\{x\\}$.\n\n> **Note.** A note.\n")
    assert myst_residue(clean) == []


# ---------------------------------------------------------------- math delimiters

CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
INLINE_MATH = re.compile(r"\$([^$]*)\$")


def math_problems(source: str) -> list[str]:
    """Stray dollar signs: an odd count, or an inline "math" span that holds a glue comment
    (two stray dollars turn the prose between them, numbers and all, into one formula)."""
    text = DISPLAY_MATH.sub("", CODE.sub("", source).replace("\\$", ""))
    found = [f"{text.count('$')} dollar signs (odd)"] if text.count("$") % 2 else []
    found += [f"prose inside $...$: {m.group(0)[:60]!r}" for m in INLINE_MATH.finditer(text)
              if "<!--" in m.group(1)]
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_dollar_signs_pair_into_formulas(path):
    problems = [f"cell {i}: {r}" for i, source in _markdown(path) for r in math_problems(source)]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("planted", [
    "capped below $ (at 0.96<!-- glue: cap:.2f --> here",
    "from 0.1<!-- glue: t:g --> to $ and finds the lowest at 0.2<!-- glue: lo --> of a perfect $.",
])
def test_math_check_catches_stray_dollars(planted):
    assert math_problems(planted)


def test_math_check_accepts_formulas_code_and_escapes():
    assert math_problems("a $x^2$ and $$\\sum_i x_i$$, `$HOME`, a price of \\$5, "
                         "$\\rho =$ 0.9<!-- glue: rho:g -->") == []


# ---------------------------------------------------------------- bound numbers


def test_every_bound_number_shows_its_computed_value():
    problems = prose_numbers.check(NOTEBOOKS)
    assert not problems, "\n".join(problems)


def test_the_chapters_have_bound_numbers_and_no_glue_roles():
    counts = {p.name: len(prose_numbers.bindings(p)) for p in NOTEBOOKS}
    assert sum(counts.values()) >= 400, counts
    assert counts["errata.ipynb"] >= 100, "the errata page binds the chapters' values"
    for path in NOTEBOOKS:
        assert "{glue" not in path.read_text(), f"{path.name} still has a glue role"


def _copy_book(tmp_path: Path) -> Path:
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("*.md"))
    return book


def _first_binding(path: Path, numeric: bool = True):
    return next(b for b in prose_numbers.bindings(path)
                if not numeric or b.fmt[-1] in "fde%")


def _edit_cell(path: Path, index: int, edit) -> None:
    notebook = json.loads(path.read_text())
    cell = notebook["cells"][index]
    cell["source"] = edit("".join(cell["source"]))
    prose_numbers.write(path, notebook)


def test_check_catches_a_planted_wrong_literal(tmp_path):
    chapter = _copy_book(tmp_path) / "02_scaled_dot_product_attention.ipynb"
    b = _first_binding(chapter)
    right = prose_numbers.Values().text(b)
    _edit_cell(chapter, b.cell, lambda s: s[:b.start - len(right)] + "9" + right + s[b.start:])
    problems = prose_numbers.check([chapter])
    assert len(problems) == 1 and b.name in problems[0] and repr(right) in problems[0], problems


def test_check_catches_a_value_from_another_notebook_that_drifted(tmp_path):
    """The errata page shows values computed by the chapters: drift there is caught too."""
    book = _copy_book(tmp_path)
    errata = book / "errata.ipynb"
    b = next(b for b in prose_numbers.bindings(errata) if b.source_notebook != errata)
    notebook = json.loads(b.source_notebook.read_text())
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == b.name:
                output["data"][prose_numbers.GLUE_MIME] = "123456789"
    prose_numbers.write(b.source_notebook, notebook)
    problems = prose_numbers.check([errata])
    assert any(b.name in p and "errata.ipynb" in p for p in problems), problems


def test_check_catches_a_binding_to_no_value(tmp_path):
    chapter = _copy_book(tmp_path) / "02_scaled_dot_product_attention.ipynb"
    index, _ = _markdown(chapter)[1]
    _edit_cell(chapter, index, lambda s: s + "\n\nIt is 3<!-- glue: no_such_value -->.\n")
    problems = prose_numbers.check([chapter])
    assert problems and "no_such_value" in problems[0]


def test_rewrite_brings_literals_to_the_new_values(tmp_path):
    """What ``make notebooks`` does after a re-run: each literal follows its new value."""
    book = _copy_book(tmp_path)
    chapter = book / "02_scaled_dot_product_attention.ipynb"
    old = prose_numbers.Values(
        {str(p): prose_numbers.glued_values(json.loads(p.read_text())) for p in [chapter]})
    b = _first_binding(chapter)
    notebook = json.loads(chapter.read_text())
    for cell in notebook["cells"]:  # a re-run that computed another value
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == b.name:
                output["data"][prose_numbers.GLUE_MIME] = "0.123456"
    prose_numbers.write(chapter, notebook)
    assert prose_numbers.check([chapter]), "the literal is stale before the rewrite"
    changed, problems = prose_numbers.rewrite([chapter], old)
    assert (changed, problems) == (1, [])
    assert prose_numbers.check([chapter]) == []
    text = dict(_markdown(chapter))[b.cell]
    assert prose_numbers.format_plain_text("0.123456", b.fmt) + "<!-- glue:" in text


def test_rewrite_refuses_a_literal_it_cannot_find(tmp_path):
    chapter = _copy_book(tmp_path) / "02_scaled_dot_product_attention.ipynb"
    index, _ = _markdown(chapter)[1]
    _edit_cell(chapter, index, lambda s: s + "\n\nIt is many<!-- glue: soft_lookup:.2f -->.\n")
    changed, problems = prose_numbers.rewrite([chapter])
    assert problems and "soft_lookup" in problems[0]


def test_format_matches_myst_nb():
    from myst_nb.core.variables import format_plain_text

    for text, fmt in [("0.8123", ".2f"), ("1234567", ",d"), ("0.00045", ".1e"), ("'a b'", "s"),
                      ("[0.1, 0.2]", "s"), ("0.25", ".1%"), ("3", "s"), ("2.5", ".0f")]:
        assert prose_numbers.format_plain_text(text, fmt) == format_plain_text(text, fmt)


# ---------------------------------------------------------------- the HTML gets MyST back


@pytest.mark.parametrize("commonmark, myst", [
    ('<a id="sec-x"></a>\n\n## Title', "(sec-x)=\n## Title"),
    ("see [the example](#sec-x).", "see {ref}`the example <sec-x>`."),
    ("see [steps](01_rnn_limits.ipynb#sec-01-sequential).",
     "see {ref}`steps <sec-01-sequential>`."),
    ("Eq. 1 [[Vaswani et al., 2017]](#cite:vaswani2017attention) is",
     "Eq. 1 {cite}`vaswani2017attention` is"),
    ("[[Thakur, 2026; Anonymous, n.d.]](#cite:source002,source004)",
     "{cite}`source002,source004`"),
    ("[`Transformer`](api.md#aiayn.model.Transformer)",
     "{py:obj}`Transformer <aiayn.model.Transformer>`"),
    ("> **Note.** First line\n> second line.\n\nAfter.", ":::{note}\nFirst line\nsecond line.\n:::\n\nAfter."),
    ("the [errata page](errata.ipynb) and 0.81<!-- glue: w:.2f -->",
     "the [errata page](errata.ipynb) and 0.81<!-- glue: w:.2f -->"),
])
def test_commonmark_forms_become_myst(commonmark, myst):
    assert commonmark_myst.to_myst(commonmark) == myst


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_commonmark_form_is_converted(path):
    """After the conversion, no label, citation or API link is left for MyST to misread."""
    converted = json.loads(commonmark_myst.notebook_to_myst(path.read_text(), str(path)))
    for cell in converted["cells"]:
        if cell["cell_type"] == "markdown":
            source = cell["source"]
            assert "<a id=" not in source and "](#" not in source and "(api.md#" not in source, source
            assert "**Note.**" not in source, source


# ---------------------------------------------------------------- no hand-typed numbers

PAGES = NOTEBOOKS + sorted((ROOT / "book").glob("*.md"))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_hand_typed_numbers_in_the_prose(path):
    """Every number in the prose is bound to its cell, or in one of the few allowed forms."""
    problems = prose_numbers.unbound([path])
    assert not problems, (f"{path.name}: numbers typed by hand (bind them, see README, "
                          "'Adding a chapter'):\n" + "\n".join(problems))


@pytest.mark.parametrize("planted", [
    "Attention is 1.85 times slower here.",
    "After 400 steps the loss is low.",
    "The ratio is about 12.6, and the rest",
    "a 2 + 2 layer model",
    "between sub-layers (512 in the base model)",
    "> **Note.** It takes 3 minutes.",
    # in math: a decimal, three digits or more, or scientific form
    "the rate is $3 \\times 10^{-3}$.",
    "the rate is $3 × 10^{-3}$.",
    "with $\\epsilon = 10^{-9}$ and",
    "$\\sqrt{2 d_k} \\approx 45.3$",
    "$d_k = 512$ here",
    "$n \\le 1,000$ positions",
    "$$\nx^{-0.5}\n$$\n\nThe next paragraph.",
    "$x = 0.5$<!-- typed: an example's input --> and $y = 0.25$",  # a marker covers one span
])
def test_unbound_check_catches_planted_numbers(planted):
    assert prose_numbers.unbound_numbers(planted), planted


def test_unbound_check_names_the_page_the_cell_and_the_number(tmp_path):
    chapter = _copy_book(tmp_path) / "06_encoder_decoder.ipynb"
    index, _ = _markdown(chapter)[1]
    _edit_cell(chapter, index, lambda s: s + "\n\nThe width is $d_k = 512$ here.\n")
    planted = [p for p in prose_numbers.unbound([chapter]) if "$d_k = 512$" in p]
    assert len(planted) == 1, planted
    assert planted[0].startswith(f"{chapter.name}, markdown cell {index}: '512' in math"), planted


@pytest.mark.parametrize("allowed", [
    "It is 0.81<!-- glue: w:.2f --> here.",
    "It is [0.62, 0.07, 0.31]<!-- glue: row -->.",
    "Section 3.2.1, §2.2 (1), Table 3, Eq. 1, chapters 6 and 7, source 003, sources 000 and 004.",
    'Source 000 prints "0.61, 0.07, 0.32".',
    "> For our base models [...] each training step took about 0.4 seconds.",
    "$d_k = 64$ and `range(10)` and [[Vaswani et al., 2017]](#cite:vaswani2017attention)",
    "## 2. Scaled dot-product attention\n\n1. An exercise.\n2. Another.",
    "The hard answer 20<!-- typed: the value of key 1, chosen in the prose --> is close.",
    "float64, bf16, W_1, GPT-2, P100",
    # in math: one or two digits, or a span marked typed
    "$d_\\text{model} = 512$<!-- typed: the paper's base model -->",
    "$h = 8$",
    "$$x^{-0.5}$$\n<!-- typed: the paper's Eq. 3 -->",
    "$d_k = 64$, $2\\pi$, $x^{2}$, $h_{t-1}$, $10^{2i/d}$ and $\\sqrt{d_k}$",
    "$d_k =$ 512<!-- glue: d_k -->",
    'Source 000 writes "from $2\\pi$ to $10000 \\cdot 2\\pi$".',  # a quotation
])
def test_unbound_check_accepts_the_allowed_forms(allowed):
    literal = {"w:.2f": "0.81", "row": "[0.62, 0.07, 0.31]", "d_k": "512"}.get
    assert prose_numbers.unbound_numbers(allowed, literal) == [], allowed


# ---------------------------------------------------------------- the errata's verdicts

ERRATA = ROOT / "book" / "errata.ipynb"
LEGEND_ITEM = re.compile(r"^- \*\*(?P<word>[a-z][a-z ]*)\*\*: ", re.M)


def verdicts(markdown_cells: list[str]) -> tuple[set[str], list[str]]:
    """The vocabulary the legend defines, and every verdict the page gives."""
    legend = set(LEGEND_ITEM.findall(markdown_cells[0]))
    given = []
    for source in markdown_cells:
        for table in re.findall(r"^\|.*\|$(?:\n^\|.*\|$)+", source, re.M):
            rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.split("\n")]
            if "verdict" in rows[0]:
                column = rows[0].index("verdict")
                given += [row[column] for row in rows[2:]]
        given += re.findall(r"Verdict: \*\*([^*]+)\*\*", source)
    return legend, given


def test_errata_verdicts_come_from_the_legend():
    cells = [source for _, source in _markdown(ERRATA)]
    legend, given = verdicts(cells)
    assert len(legend) >= 4, f"the first cell must define the verdicts as '- **word**: ...' ({legend})"
    assert len(given) >= 50, f"only {len(given)} verdicts found"
    undefined = sorted({v for v in given if v not in legend})
    assert not undefined, f"verdicts the legend does not define: {undefined}"


def test_verdict_check_catches_a_planted_verdict():
    legend_cell = "# Errata\n\n- **correct**: holds.\n- **wrong**: does not hold.\n"
    table = "| source | claim | verdict |\n| --- | --- | --- |\n| 000 | x | correct |\n| 002 | y | mostly fine |\n"
    legend, given = verdicts([legend_cell, table, "Verdict: **roughly right**."])
    assert legend == {"correct", "wrong"}
    assert sorted(v for v in given if v not in legend) == ["mostly fine", "roughly right"]
