"""Numbers in the chapters' prose, bound to the cells that compute them.

Colab and Jupyter show a notebook's markdown as plain CommonMark, where a MyST role
such as ``{glue:text}`soft_lookup:.2f``` would show as raw text. So the prose holds
the number itself, followed at once by an invisible *binding*: an HTML comment that
names the value a cell records with ``aiayn.glue(name, value)`` and its format::

    the soft lookup returns 19.55<!-- glue: soft_lookup:.2f -->, close to the hard answer

The key inside the comment is what MyST-NB's ``{glue:text}`` role takes: ``name``,
``name:format`` (a Python format spec ending in its type letter) or, for a value
recorded by another notebook (the errata page), ``01_rnn_limits.ipynb::name:format``.
The value is read from the committed outputs of the notebook (nbval proves that a
fresh run reproduces them) and formatted exactly as MyST-NB formats ``{glue:text}``.

Commands (``make test`` runs ``check``; ``make notebooks`` runs the other two around
the re-execution of the chapters)::

    python scripts/prose_numbers.py check                    # every literal equals its value
    python scripts/prose_numbers.py snapshot OLD.json        # the glued values, before a re-run
    python scripts/prose_numbers.py rewrite [--old OLD.json] # literals from the new values
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from ast import literal_eval
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
GLUE_MIME = "application/papermill.record/text/plain"
BINDING = re.compile(r"<!-- glue: (?P<key>[^\s>]+) -->")
# What a bound literal may end with when the rewrite has no old value to look for:
# a number as Python's format() writes it (sign, digits, separators, exponent, %).
NUMBER_AT_END = re.compile(r"[-+]?(?:\d[\d,_]*)?\.?\d+(?:[eE][-+]?\d+)?%?\Z|[-+]?(?:inf|nan)%?\Z")
NUMERIC_TYPES = set("bcdoxXeEfFgGn%")


def format_plain_text(text: str, fmt_spec: str) -> str:
    """Format a glued ``text/plain`` value as MyST-NB's ``{glue:text}`` role does."""
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if fmt_spec == "":
        return str(value)
    type_char = fmt_spec[-1]
    if type_char == "s":
        value = str(value)
    elif type_char in "bcdoxX":
        value = int(value)
    elif type_char in "eEfFgGn%":
        value = float(value)
    return format(value, fmt_spec)


@dataclass(frozen=True)
class Binding:
    """One ``LITERAL<!-- glue: key -->`` in a markdown cell."""

    notebook: Path  # the notebook whose prose holds the literal
    cell: int  # index of the markdown cell
    start: int  # offset of the comment in the cell's source
    end: int  # offset just after the comment
    name: str  # the glued value's name
    fmt: str  # its format spec ("s" when none is given, as MyST-NB)
    source_notebook: Path  # the notebook whose outputs record the value

    @property
    def where(self) -> str:
        return f"{self.notebook.name}, markdown cell {self.cell}"

    @property
    def key(self) -> str:
        return f"{self.name}:{self.fmt}"


def parse_key(key: str, notebook: Path) -> tuple[str, str, Path]:
    """``name[:fmt]`` or ``other.ipynb::name:fmt`` -> (name, fmt, notebook of the value)."""
    source = notebook
    if "::" in key:  # another notebook's value (MyST-NB needs a format there: give one)
        path, key = key.split("::", 1)
        source = (notebook.parent / path).resolve()
    name, fmt = key.rsplit(":", 1) if ":" in key else (key, "s")
    return name, fmt, source


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def write(path: Path, notebook: dict) -> None:
    """Save as Jupyter does (nbformat's JSON layout), so a rewrite changes only the literals."""
    text = json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def markdown_cells(notebook: dict) -> list[tuple[int, str]]:
    return [(i, "".join(c["source"])) for i, c in enumerate(notebook["cells"])
            if c["cell_type"] == "markdown"]


def glued_values(notebook: dict) -> dict[str, str]:
    """name -> the ``text/plain`` that ``aiayn.glue`` recorded in the cell outputs."""
    values = {}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None and GLUE_MIME in output.get("data", {}):
                text = output["data"][GLUE_MIME]
                values[name] = "".join(text) if isinstance(text, list) else text
    return values


def bindings(path: Path) -> list[Binding]:
    found = []
    for index, source in markdown_cells(read(path)):
        for match in BINDING.finditer(source):
            name, fmt, origin = parse_key(match["key"], path)
            found.append(Binding(path, index, match.start(), match.end(), name, fmt, origin))
    return found


class Values:
    """The glued values of every notebook, read once each."""

    def __init__(self, overrides: dict[str, dict[str, str]] | None = None):
        self._cache: dict[Path, dict[str, str]] = {}
        self._overrides = {Path(k).resolve(): v for k, v in (overrides or {}).items()}

    def of(self, notebook: Path) -> dict[str, str]:
        notebook = notebook.resolve()
        if notebook not in self._cache:
            if notebook in self._overrides:
                self._cache[notebook] = self._overrides[notebook]
            elif not notebook.exists():
                raise LookupError(f"no notebook {notebook}")
            else:
                self._cache[notebook] = glued_values(read(notebook))
        return self._cache[notebook]

    def text(self, binding: Binding) -> str:
        """The literal that ``binding`` must show."""
        values = self.of(binding.source_notebook)
        if binding.name not in values:
            raise LookupError(f"{binding.where}: no glued value {binding.name!r} in "
                              f"{binding.source_notebook.name}")
        return format_plain_text(values[binding.name], binding.fmt)


# A literal must be the whole number: "90.81" does not show the value 0.81, nor "0.815".
GLUED_BEFORE = re.compile(r"[\w.,+\-]\Z")
GLUED_AFTER = re.compile(r"^[0-9]")


def shows(before: str, after: str, expected: str) -> bool:
    """Whether the text around a binding shows exactly ``expected`` as its literal."""
    if not before.endswith(expected):
        return False
    return not GLUED_BEFORE.search(before[:len(before) - len(expected)]) and not GLUED_AFTER.match(after)


def check(paths: list[Path], values: Values | None = None) -> list[str]:
    """One message per binding whose literal is not its value (empty when all agree)."""
    values = values or Values()
    problems = []
    for path in paths:
        source = {i: s for i, s in markdown_cells(read(path))}
        for b in bindings(path):
            try:
                expected = values.text(b)
            except (LookupError, ValueError) as exc:
                problems.append(str(exc))
                continue
            before, after = source[b.cell][:b.start], source[b.cell][b.end:]
            if not shows(before, after, expected):
                shown = before[-max(len(expected), 12):].split("\n")[-1]
                problems.append(f"{b.where}: the prose shows {shown!r} before "
                                f"<!-- glue: {b.key} -->, the value is {expected!r}")
    return problems


def _rewrite_cell(source: str, cell_bindings: list[Binding], new: Values,
                  old: Values | None) -> tuple[str, list[str]]:
    problems = []
    # From the last binding to the first, so earlier offsets stay valid.
    for b in sorted(cell_bindings, key=lambda b: b.start, reverse=True):
        try:
            expected = new.text(b)
        except (LookupError, ValueError) as exc:
            problems.append(str(exc))
            continue
        before = source[:b.start]
        if shows(before, source[b.end:], expected):
            continue
        candidates = []
        if old is not None:
            try:
                candidates.append(old.text(b))
            except LookupError:
                pass
        number = NUMBER_AT_END.search(before) if b.fmt[-1:] in NUMERIC_TYPES else None
        if number:
            candidates.append(number.group(0))
        stale = next((c for c in candidates if c and before.endswith(c)), None)
        if stale is None:
            problems.append(f"{b.where}: cannot tell which text before <!-- glue: {b.key} --> "
                            f"is its literal; write the value {expected!r} there by hand")
            continue
        source = before[:len(before) - len(stale)] + expected + source[b.start:]
    return source, problems


def rewrite(paths: list[Path], old: Values | None = None) -> tuple[int, list[str]]:
    """Write each bound literal from the notebooks' current outputs; returns (changed, problems)."""
    new, changed, problems = Values(), 0, []
    for path in paths:
        notebook, before = read(path), changed
        by_cell: dict[int, list[Binding]] = {}
        for b in bindings(path):
            by_cell.setdefault(b.cell, []).append(b)
        for index, cell_bindings in by_cell.items():
            cell = notebook["cells"][index]
            source = "".join(cell["source"])
            updated, cell_problems = _rewrite_cell(source, cell_bindings, new, old)
            problems += cell_problems
            if updated != source:
                changed += 1
                cell["source"] = updated.splitlines(keepends=True)
        if changed > before:
            write(path, notebook)
    return changed, problems


# ------------------------------------------------------------------ unbound numbers
#
# Every number in the prose is bound to the value a cell computes. The few forms in which a
# number may stand alone are these, and each is visible in the source:
#   - in code (`...`, fenced blocks), in a link's target;
#   - in math ($...$, $$...$$) when it is short: one or two digits and no decimal point
#     ($d_k = 64$, $h = 8$, $2\pi$, $x^{2}$); a decimal, a number of three digits or more, or
#     one in scientific form in math (MATH_VALUE below) is a value like any other: it is
#     moved out of the math and bound ($d_k =$ 512<!-- glue: d_k -->), or the math is
#     followed by ``<!-- typed: why -->`` ($d_\text{model} = 512$<!-- typed: Table 3 -->);
#   - in a quotation "..." (or “...”) of a source or of the paper;
#   - as part of a name or reference: Section 3.2, §2.2, Table 3, Figure 1, Eq. 1, chapter 6,
#     source 000, step 3 ... (REFERENCE below), a heading's own number ("## 2. ...");
#   - in a citation's link text ([[Vaswani et al., 2017]](#cite:...));
#   - followed by ``<!-- typed: why -->``: a number set by hand on purpose (an input of an
#     example chosen in the prose, say), with the reason written next to it.

# A number, with the unit letters that may stick to it ("65M", "2.8x", "40k", "3 GB" apart).
NUMBER = re.compile(r"(?<![\w.\-/])[-+−]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
                    r"(?:[kKMGTx]|GB|MB|GiB|MiB|ms)?(?![\w])")
TYPED = re.compile(r"(?<![\w.\-/])[-+−]?\d[^\s<]*<!-- typed: [^>]+ -->")
REFERENCE = re.compile(
    r"(?:\b(?:[Ss]ections?|[Tt]ables?|[Ff]igures?|[Ff]ig\.|[Ee]qs?\.|[Ee]quations?|[Cc]hapters?"
    r"|[Ss]ources?|[Ss]teps?|[Aa]ppendix|[Ll]ines?|[Rr]ows?|[Cc]ells?|[Ii]ssues?|[Ll]ayers?|"
    r"[Hh]eads?|[Pp]art|[Vv]ersion|Python|PyTorch|ipywidgets|JupyterLab|Jupyter Book|[Kk]ey|"
    r"[Qq]uery|[Tt]oken|[Pp]osition|WMT|newstest)|§)\s*"
    r"(?:[\d.]+[a-z]?\)?(?:\s*(?:,|and|or|to|–|-)?\s*\(?))*$")
CODE = [
    re.compile(r"^```(?!\{(?:list-table|note|admonition))[^\n]*\n.*?^```", re.S | re.M),  # code
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # a MyST role in a page (.md), {glue:text} included
    re.compile(r"`[^`\n]*`"),  # inline code
]
# Display math, then inline math (a "$" escaped as "\$" opens none).
MATH = re.compile(r"\$\$(?P<display>.*?)\$\$|(?<!\\)\$(?P<inline>[^$\n]+?)\$", re.S)
MATH_TYPED = re.compile(r"\s*<!-- typed: [^>]+ -->")  # right after the closing $ or $$
# In math, the numbers that are values: one in scientific form (3 \times 10^{-3}, 3 × 10^{-3},
# 10^{-9}, 1e-9), a decimal (0.242, 45.3, .5), or three digits or more (512, 10000, 1,000,
# 10{,}000; the 000 of 10\,000). One or two digits alone (64, 8, 2\pi, ^{2}) are not.
MATH_VALUE = re.compile(
    r"(?<![\w.])(?:\d+(?:\.\d+)?\s*(?:\\times|×|\\cdot|·)\s*)?10\s*\^\s*"
    r"(?:\{\s*[-+−]?\s*\d+\s*\}|[-+−]?\d)"  # scientific form
    r"|(?<![\w.])\d+(?:\.\d+)?[eE][-+−]?\d+(?!\w)"  # 1e-9, 3.0e+13
    r"|(?<![\d.])(?:\d*\.\d+|\d{1,3}(?:(?:,|\{,\})\d{3})+|\d{3,})(?![\d])"  # decimal, 3+ digits
)
QUOTED = [
    re.compile(r"\"[^\"\n]*\"|“[^”]*”"),  # quotations
    re.compile(r"^>(?! \*\*Note\.\*\*).*(?:\n>.*)*", re.M),  # a quoted passage (not a note)
]
SKIP = [
    re.compile(r"\[\[[^\]]*\]\]\(#cite:[^)]*\)"),  # a citation's text
    re.compile(r"\]\([^)\s]*\)"),  # a link's target
    re.compile(r"<[^>\n]*>"),  # HTML tags and comments (bindings are removed before)
    *QUOTED,
    re.compile(r"(?<![\w.,])00\d(?![\w])"),  # the sources' numbers: 000, 002, 003, 004
    re.compile(r"^#+ \d+(?:\.\d+)*\.? ", re.M),  # a heading's own number
    re.compile(r"^:[\w-]+:.*$", re.M),  # a directive's options (in a page)
    re.compile(r"^\s*\d+[.)] ", re.M),  # a numbered list's item numbers
    re.compile(r"^### Solution \d+\s*$", re.M),  # a solution's heading names its exercise
]


def unbound_numbers(markdown: str, literal: Callable[[str], str] | None = None) -> list[str]:
    """The numbers in ``markdown`` that are neither bound nor in an allowed form.

    ``literal(key)`` gives the text a binding's literal must be (``check`` verifies it);
    that many characters before each binding are the bound number, not prose.
    """
    text = _blank_bound_literals(markdown, literal)
    for pattern in CODE:
        text = pattern.sub(_blank, text)
    text, found = _check_math(text)
    text = TYPED.sub(_blank, text)
    for pattern in SKIP:
        text = pattern.sub(_blank, text)
    for match in NUMBER.finditer(text):
        if REFERENCE.search(text[max(0, match.start() - 40):match.start()]):
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        context = " ".join(markdown[line_start:match.end() + 30].split())
        found.append(f"{match.group(0)!r} in: ...{context[-90:]}")
    return found


def _blank(match: re.Match) -> str:
    return " " * len(match.group(0))


def _check_math(text: str) -> tuple[str, list[str]]:
    """``text`` with its math blanked, and the values typed in math that is not marked typed.

    Math inside a quotation of a source or of the paper is quoted as it stands.
    """
    quoted = [m.span() for pattern in QUOTED for m in pattern.finditer(text)]
    found, out, last = [], [], 0
    for match in MATH.finditer(text):
        typed = MATH_TYPED.match(text, match.end())
        end = typed.end() if typed else match.end()
        inside_quote = any(a <= match.start() and match.end() <= b for a, b in quoted)
        if not typed and not inside_quote:
            body = match["display"] if match["display"] is not None else match["inline"]
            math = " ".join(match.group(0).split())
            for value in MATH_VALUE.finditer(body):
                found.append(f"{value.group(0)!r} in math {math[:90]!r}: bind it outside the "
                             "math, or mark the math <!-- typed: why -->")
        out.append(text[last:match.start()] + " " * (end - match.start()))
        last = end
    out.append(text[last:])
    return "".join(out), found


def _blank_bound_literals(markdown: str, literal: Callable[[str], str] | None) -> str:
    out, last = [], 0
    for match in BINDING.finditer(markdown):
        before = markdown[last:match.start()]
        try:
            size = len(literal(match["key"])) if literal else 0
        except (LookupError, ValueError):
            size = 0
        if not size:  # an unknown value: ``check`` reports it; blank the last word here
            word = re.search(r"\S+\Z", before)
            size = len(word.group(0)) if word else 0
        size = min(size, len(before))
        out.append(before[:len(before) - size] + " " * (size + match.end() - match.start()))
        last = match.end()
    out.append(markdown[last:])
    return "".join(out)


def unbound(paths: list[Path], values: Values | None = None) -> list[str]:
    """One message per unbound number in the markdown of ``paths`` (notebooks or .md pages)."""
    values = values or Values()
    problems = []
    for path in paths:
        if path.suffix == ".md":  # an HTML-only page: numbers come through {glue:text} roles
            problems += [f"{path.name}: {u}" for u in unbound_numbers(path.read_text())]
            continue
        for index, source in markdown_cells(read(path)):
            def literal(key: str, path: Path = path, index: int = index) -> str:
                name, fmt, origin = parse_key(key, path)
                return values.text(Binding(path, index, 0, 0, name, fmt, origin))

            problems += [f"{path.name}, markdown cell {index}: {u}"
                         for u in unbound_numbers(source, literal)]
    return problems


def notebooks(args: list[str]) -> list[Path]:
    return [Path(a).resolve() for a in args] or sorted(BOOK.glob("*.ipynb"))


def pages() -> list[Path]:
    """Every page of the book: the notebooks and the .md pages."""
    return notebooks([]) + sorted(BOOK.glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check").add_argument("notebooks", nargs="*")
    snap = sub.add_parser("snapshot")
    snap.add_argument("out")
    rew = sub.add_parser("rewrite")
    rew.add_argument("--old", help="the snapshot taken before the notebooks were re-executed")
    rew.add_argument("notebooks", nargs="*")
    sub.add_parser("unbound", help="list the numbers in the prose that are not bound").add_argument(
        "paths", nargs="*", help="notebooks or .md pages (default: every page of book/)")
    args = parser.parse_args(argv)

    if args.command == "snapshot":
        snapshot = {str(p): glued_values(read(p)) for p in notebooks([])}
        Path(args.out).write_text(json.dumps(snapshot, indent=1))
        return 0
    if args.command == "unbound":
        paths = [Path(a).resolve() for a in args.paths] or pages()
        problems = unbound(paths)
        print(f"{len(problems)} unbound numbers in {len(paths)} pages")
        for problem in problems:
            print("  " + problem)
        return 1 if problems else 0
    paths = notebooks(args.notebooks)
    if args.command == "check":
        problems = check(paths)
        count = sum(len(bindings(p)) for p in paths)
        print(f"{count} bound numbers in {len(paths)} notebooks, {len(problems)} disagree")
    else:
        old = Values(json.loads(Path(args.old).read_text())) if args.old else None
        changed, problems = rewrite(paths, old)
        print(f"rewrote literals in {changed} markdown cells")
    for problem in problems:
        print("  " + problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
