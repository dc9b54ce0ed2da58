"""The package's layout keeps its architecture (README, "Repository layout").

Read from the source, not imported: every ``import`` of an ``aiayn`` module, at the top of a
file or inside a function, is an edge from one module to another.

- the model (the modules at the top of ``aiayn``) imports nothing from a subpackage;
- ``aiayn.learning`` imports only the model and itself;
- ``aiayn.train`` (scale-out) imports the model, learning and itself;
- ``aiayn.experiments`` imports the model, learning and itself;
- ``aiayn.figures`` imports anything but scale-out;
- ``aiayn.exercises`` (the readers' check functions) imports the model, learning and itself;
- no import cycle between modules, and no module longer than 400 lines.

The last test plants a violating import in a copy of the package and shows the check fails.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "aiayn"
MAX_LINES = 400
ALLOWED = {
    "model": {"model"},
    "learning": {"model", "learning"},
    "train": {"model", "learning", "train"},
    "experiments": {"model", "learning", "experiments"},
    "figures": {"model", "learning", "experiments", "figures"},
    "exercises": {"model", "learning", "exercises"},
}


def module_name(path: Path, root: Path) -> str:
    """src/aiayn/learning/data.py -> 'learning.data'; src/aiayn/train/__init__.py -> 'train'."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(module: str) -> str:
    """The part of the package a module belongs to ('' is the package itself: the model)."""
    first = module.split(".")[0]
    return first if first in ALLOWED else "model"


def imports(path: Path, root: Path) -> set[str]:
    """The aiayn modules that ``path`` imports (without the 'aiayn.' prefix)."""
    here = module_name(path, root)
    package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    if here == "":
        package = []
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.removeprefix("aiayn.") for a in node.names
                      if a.name.startswith("aiayn.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            elif (node.module or "").startswith("aiayn"):
                target = node.module.removeprefix("aiayn").lstrip(".")
            else:
                continue
            # `from . import x` / `from .pkg import module` name modules, not objects
            for alias in node.names:
                sub = f"{target}.{alias.name}".strip(".")
                if (root / sub.replace(".", "/")).with_suffix(".py").exists() or \
                        (root / sub.replace(".", "/") / "__init__.py").exists():
                    found.add(sub)
                else:
                    found.add(target)
    found.discard(here)
    return {m for m in found if m}


def import_graph(root: Path) -> dict[str, set[str]]:
    return {module_name(p, root): imports(p, root) for p in sorted(root.rglob("*.py"))}


def rule_violations(root: Path) -> list[str]:
    graph = import_graph(root)
    problems = []
    for module, targets in graph.items():
        for target in sorted(targets):
            if layer(target) not in ALLOWED[layer(module)]:
                problems.append(f"aiayn.{module or '__init__'} ({layer(module)}) imports "
                                f"aiayn.{target} ({layer(target)})")
    return problems


def cycles(root: Path) -> list[list[str]]:
    """Every import cycle, each as the list of modules around it (depth-first search)."""
    graph = import_graph(root)
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if target not in graph:
                continue
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_layers_import_only_what_they_may():
    assert rule_violations(PACKAGE) == []


def test_no_import_cycle():
    assert cycles(PACKAGE) == []


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_model_is_at_the_top_and_the_subpackages_are_the_five_kinds():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert top == ["attention", "inspection", "layers", "masks", "model", "positional", "pretrained",
                   "utils"]
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert subpackages == ["exercises", "experiments", "figures", "learning", "train"]


def test_the_checks_fail_on_planted_violations(tmp_path):
    copy = tmp_path / "aiayn"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert rule_violations(copy) == [] and cycles(copy) == []
    # the model reaching into a figure module, inside a function (a lazy import counts)
    model = copy / "model.py"
    model.write_text(model.read_text() + "\n\ndef _planted():\n"
                     "    from .figures.attention import plot_attention\n")
    assert rule_violations(copy) == [
        "aiayn.model (model) imports aiayn.figures.attention (figures)"]
    # learning importing an experiment, with an absolute import
    data = copy / "learning" / "data.py"
    data.write_text(data.read_text() + "\nimport aiayn.experiments.heads\n")
    assert "aiayn.learning.data (learning) imports aiayn.experiments.heads (experiments)" in \
        rule_violations(copy)
    # a cycle: masks -> attention -> masks
    masks = copy / "masks.py"
    masks.write_text(masks.read_text() + "\nfrom .attention import MultiHeadAttention\n")
    assert ["attention", "masks", "attention"] in cycles(copy)
