"""The Performance page's GPU section: the table of ``benchmarks/results/cuda.md`` when the
GPU check (``scripts/gpu_check.sh``) has written one, else a plain statement that the GPU
results have not been measured yet. The page holds the marker line ``<!-- gpu-results -->``.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "<!-- gpu-results -->"
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cuda.md"

NOT_MEASURED = (
    "**Not measured yet.** No GPU has run the check so far: every number on this page comes "
    "from a CPU. `scripts/gpu_check.sh` is ready for the first machine with CUDA (CUDA tests, "
    "these benchmarks in float32 and bf16 autocast with tokens per second and the model FLOP "
    "utilisation, chapters 2, 4 and 7 run on the GPU); its table will appear here."
)


def gpu_section(results: Path = RESULTS) -> str:
    """What replaces the marker: an include of ``results`` if it exists, else the note."""
    if results.exists():
        return f"```{{include}} ../benchmarks/results/{results.name}\n:start-line: 2\n```"
    return NOT_MEASURED


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, gpu_section())


def setup(app):
    app.connect("source-read", _on_source_read)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
