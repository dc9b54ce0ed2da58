"""Which compared outputs of a chapter differ between two executions of it.

Strict nbval compares every output of a code cell (but its images and the cells tagged
``nbval-ignore-output``) after the regexes of ``tests/nbval_sanitize.cfg``. This script
applies the same rules to two copies of a notebook, say the committed one and one executed on a
perturbed floating-point path, and prints each cell whose outputs differ, line by line. It is
how the fragile digits of a chapter are found before nbval trips on them.

    python scripts/output_drift.py book/06_encoder_decoder.ipynb /tmp/06_perturbed.ipynb
"""
from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from gpu_check import sanitize_rules  # the regexes of tests/nbval_sanitize.cfg

# what nbval leaves out of the comparison (nbval.plugin.IPyNbFile.skip_compare, without nbdime)
SKIPPED = {"image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json"}


def compared_text(cell: dict, patterns) -> list[str]:
    """The lines of ``cell``'s outputs that nbval compares, sanitized."""
    lines = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts = {output["name"]: output["text"]}
        elif output["output_type"] == "error":
            parts = {"error": f"{output['ename']}: {output['evalue']}"}
        else:
            parts = {k: v for k, v in output.get("data", {}).items() if k not in SKIPPED}
        for kind, text in parts.items():
            text = "".join(text) if isinstance(text, list) else json.dumps(text) if not isinstance(text, str) else text
            for regex, replace in patterns:
                text = regex.sub(replace, text)
            lines += [f"[{kind}] {line}" for line in text.splitlines()]
    return lines


def drift(committed: Path, fresh: Path) -> dict[int, list[str]]:
    """{cell index: unified diff lines} for each compared cell whose outputs differ."""
    patterns = sanitize_rules()
    old, new = (json.loads(p.read_text())["cells"] for p in (committed, fresh))
    if len(old) != len(new):
        raise ValueError(f"{committed} has {len(old)} cells, {fresh} has {len(new)}")
    found = {}
    for index, (a, b) in enumerate(zip(old, new, strict=True)):
        if a["cell_type"] != "code" or "nbval-ignore-output" in a["metadata"].get("tags", []):
            continue
        before, after = compared_text(a, patterns), compared_text(b, patterns)
        if before != after:
            found[index] = [line for line in difflib.unified_diff(before, after, lineterm="", n=0)
                            if not line.startswith(("---", "+++", "@@"))]
    return found


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    differing = drift(Path(sys.argv[1]), Path(sys.argv[2]))
    for index, lines in differing.items():
        print(f"cell {index}:")
        print("\n".join(f"    {line}" for line in lines))
    print(f"{len(differing)} cell(s) differ")
