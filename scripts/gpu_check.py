"""The GPU check: everything the book claims about CUDA, run once a GPU is at hand.

    scripts/gpu_check.sh                 # on a machine with CUDA: about 10 minutes at most
    scripts/gpu_check.sh --dry-run       # the same logic on the CPU, tiny sizes, seconds

Four stages, each given what is left of one time limit (``--time-limit``, 570 s by
default), each in a subprocess that is stopped when its time is up, so that the check
ends on time with what it has:

1. **tests**: ``pytest -m cuda`` over the test files that hold CUDA tests;
2. **benchmarks**: the CUDA rows of ``benchmarks/run.py``: aiayn against
   ``torch.nn.Transformer`` (a training step and an inference pass, float32 and bf16
   autocast, base-sized stacks with tokens/s and the model FLOP utilisation against the
   GPU's published peak for the dtype the products ran in), fused against explicit attention (time and memory), and
   cached decoding; written as they finish, then to ``benchmarks/results/cuda.md``;
3. **notebooks**: chapters 2, 4 and 7 executed on the GPU and compared with their
   committed (CPU) outputs the way strict nbval compares them (text outputs, after
   ``tests/nbval_sanitize.cfg``, cells tagged ``nbval-ignore-output`` skipped); every cell
   that differs is reported, and whether it differs only in device names and rounding;
4. **report**: ``gpu_check.log`` and ``summary.json`` in ``--log-dir``.

Without CUDA it says so in one line and, with ``--dry-run`` (what the unit test runs),
exercises the same stages on the CPU at tiny sizes, writing nothing under benchmarks/.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = ("02_scaled_dot_product_attention", "04_multi_head_attention",
            "07_training_and_inference")
# What each stage may take at most, in seconds (each also gets no more than what is left).
STAGE_CAPS = {"tests": 150, "benchmarks": 240, "notebooks": 400}
NOTEBOOK_PACKAGES = ("nbformat", "nbclient", "ipykernel")


class Clock:
    """What is left of the check's time limit."""

    def __init__(self, limit_s: float):
        self.limit_s, self.start = limit_s, time.monotonic()

    def left(self) -> float:
        return self.limit_s - (time.monotonic() - self.start)

    def budget(self, stage: str) -> float:
        return max(0.0, min(STAGE_CAPS[stage], self.left() - 5))


class Log:
    """Progress on stdout and in ``gpu_check.log``."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "gpu_check.log"
        self.path.write_text("")
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self.start:6.1f} s] {message}"
        print(line, flush=True)
        with self.path.open("a") as f:
            f.write(line + "\n")


def run_stage(command: list[str], timeout: float, log: Log, env: dict | None = None) -> dict:
    """Run ``command`` for at most ``timeout`` seconds; its output goes to the log."""
    if timeout < 1:
        log(f"skipped (no time left): {' '.join(command[:4])} ...")
        return {"status": "skipped", "why": "no time left"}
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as stopped:
        out = (stopped.stdout or b"")
        out = out.decode() if isinstance(out, bytes) else out
        with log.path.open("a") as f:
            f.write(out)
        log(f"stopped at its time limit ({timeout:.0f} s)")
        return {"status": "timed out", "seconds": round(time.monotonic() - started, 1)}
    with log.path.open("a") as f:
        f.write(done.stdout + done.stderr)
    return {"status": "ok" if done.returncode == 0 else f"exit {done.returncode}",
            "seconds": round(time.monotonic() - started, 1), "stdout": done.stdout}


def child_env(device: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["MPLBACKEND"] = "Agg"
    env["AIAYN_GPU_CHECK_DEVICE"] = device
    return env


# ----------------------------------------------------------------------------- 1. tests


def cuda_test_files() -> list[str]:
    """The test files that hold tests marked ``cuda`` (or the parametrization that adds it)."""
    files = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        text = path.read_text()
        if "mark.cuda" in text or "DEVICE_DTYPES" in text:
            files.append(str(path.relative_to(REPO)))
    return files


def junit_counts(report: Path) -> dict:
    """passed / failed / skipped / errors, and the failing tests' ids, from a JUnit XML file."""
    import xml.etree.ElementTree as ET

    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "failures": []}
    if not report.exists():
        return counts
    for case in ET.parse(report).iter("testcase"):
        kinds = {child.tag for child in case}
        name = f"{case.get('classname')}::{case.get('name')}"
        if "failure" in kinds:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif "error" in kinds:
            counts["errors"] += 1
            counts["failures"].append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def stage_tests(clock: Clock, log: Log, folder: Path, dry_run: bool) -> dict:
    files = cuda_test_files()
    if dry_run:  # one file is enough to run the logic
        files = [f for f in files if f.endswith("test_attention.py")] or files[:1]
    report = folder / "cuda-tests.xml"
    log(f"tests: pytest -m cuda over {len(files)} files")
    result = run_stage([sys.executable, "-m", "pytest", *files, "-m", "cuda", "-q",
                        "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={report}"],
                       clock.budget("tests"), log, child_env("cuda"))
    result.pop("stdout", None)
    result |= junit_counts(report)
    log(f"tests: {result['passed']} passed, {result['failed']} failed, "
        f"{result['errors']} errors, {result['skipped']} skipped ({result['status']})")
    return result


# ------------------------------------------------------------------------ 2. benchmarks


def benchmark_plan(device: str, tiny: bool) -> list[tuple[str, dict]]:
    """(function of benchmarks/run.py, keyword arguments), in the order they are run."""
    if tiny:
        small = dict(d_model=32, n_heads=4, d_ff=64, n_layers=1, batch=2, length=8, repeats=2,
                     device=device)
        return [("bench_transformer", small),
                ("bench_transformer", small | {"autocast_dtype": "bfloat16"}),
                ("bench_attention_paths", dict(lengths=(16,), d_model=32, n_heads=4,
                                               device=device, repeats=2)),
                ("bench_decoding", dict(steps=(4,), d_model=32, n_layers=1, device=device,
                                        repeats=2))]
    base = dict(n_layers=6, batch=32, length=256, device=device)  # the paper's base stacks
    return [("bench_transformer", dict(device=device, repeats=10)),
            ("bench_transformer", base),
            ("bench_transformer", base | {"autocast_dtype": "bfloat16"}),
            ("bench_attention_paths", dict(device=device)),
            ("bench_decoding", dict(device=device))]


def benchmark_worker(device: str, tiny: bool, rows_path: Path) -> None:
    """Run the plan, appending each benchmark's rows to ``rows_path`` (JSON lines) as soon as
    it is done, so that rows finished before a time limit are kept."""
    import dataclasses

    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import run as bench  # benchmarks/run.py

    if device == "cuda":  # what the paper's GPUs would use for float32 matmuls is not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
    for name, kwargs in benchmark_plan(device, tiny):
        if "autocast_dtype" in kwargs:
            kwargs = kwargs | {"autocast_dtype": getattr(torch, kwargs["autocast_dtype"])}
        rows = getattr(bench, name)(**kwargs)
        with rows_path.open("a") as f:
            for row in rows:
                f.write(json.dumps(dataclasses.asdict(row)) + "\n")
        print(f"benchmarks: {name} done ({len(rows)} rows)", flush=True)


def stage_benchmarks(clock: Clock, log: Log, folder: Path, device: str, dry_run: bool,
                     results: Path) -> dict:
    rows_path = folder / "benchmark-rows.jsonl"
    rows_path.write_text("")
    log(f"benchmarks: {len(benchmark_plan(device, dry_run))} runs on {device}")
    command = [sys.executable, str(Path(__file__).resolve()), "--benchmark-worker",
               "--device", device, "--rows", str(rows_path)] + (["--dry-run"] if dry_run else [])
    result = run_stage(command, clock.budget("benchmarks"), log, child_env(device))
    result.pop("stdout", None)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line]
    result["rows"] = len(rows)
    if rows:
        sys.path.insert(0, str(REPO / "benchmarks"))
        import run as bench
        import torch

        notes = [f"written by scripts/gpu_check.sh ({result['status']}"
                 f"{'' if result['status'] == 'ok' else ': the rows finished in time'})"]
        text = bench.to_markdown([bench.Row(**r) for r in rows],
                                 bench.machine_info(torch.device(device)), notes)
        results.mkdir(parents=True, exist_ok=True)
        (results / "cuda.md").write_text(text)
        result["written"] = str(results / "cuda.md")
        log(f"benchmarks: {len(rows)} rows written to {results / 'cuda.md'}")
    return result


# ------------------------------------------------------------------------- 3. notebooks


def sanitize_rules() -> list[tuple[re.Pattern, str]]:
    """The regex replacements of tests/nbval_sanitize.cfg (nbval's --nbval-sanitize-with)."""
    parser = configparser.ConfigParser()
    parser.read(REPO / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]


def text_outputs(cell: dict, rules) -> list[str]:
    """What strict nbval compares of a cell: its streams and text/plain results, sanitized."""
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text = "".join(out.get("text", ""))
        elif out.get("output_type") in {"execute_result", "display_data"}:
            text = "".join(out.get("data", {}).get("text/plain", ""))
        elif out.get("output_type") == "error":
            text = f"{out.get('ename')}: {out.get('evalue')}"
        else:
            continue
        for pattern, replacement in rules:
            text = pattern.sub(replacement, text)
        texts.append(text)
    return texts


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_DEVICE = re.compile(r"\b(?:cuda(?::\d+)?|cpu|NVIDIA [\w -]+|AMD EPYC[\w -]*)\b")


def classify(committed: str, fresh: str, rel: float = 1e-3) -> str:
    """"same", "device and rounding" (equal once device names are masked, every integer
    equal and every decimal within one unit of its last printed digit or ``rel``), or
    "different"."""
    if committed == fresh:
        return "same"
    a, b = _DEVICE.sub("DEVICE", committed), _DEVICE.sub("DEVICE", fresh)
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return "different"
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        fx, fy = float(x), float(y)
        decimals = len(x.split(".")[1]) if "." in x and "e" not in x.lower() else None
        unit = 10.0 ** -decimals * 1.001 if decimals else 0.0  # one unit of the last digit
        if abs(fx - fy) > max(rel * max(abs(fx), abs(fy)), unit):
            return "different"
    return "device and rounding"


def compare_notebooks(committed: dict, fresh: dict) -> list[dict]:
    """One entry per code cell whose outputs differ, with its verdict (see :func:`classify`)."""
    rules = sanitize_rules()
    diffs = []
    code = [(i, c) for i, c in enumerate(committed["cells"]) if c["cell_type"] == "code"]
    fresh_code = [c for c in fresh["cells"] if c["cell_type"] == "code"]
    for (index, old), new in zip(code, fresh_code, strict=True):
        if "nbval-ignore-output" in old.get("metadata", {}).get("tags", []):
            continue
        a, b = text_outputs(old, rules), text_outputs(new, rules)
        if a == b:
            continue
        if len(a) != len(b):
            verdict = "different"
        else:
            verdicts = {classify(x, y) for x, y in zip(a, b, strict=True)}
            verdict = "different" if "different" in verdicts else "device and rounding"
        first = next((y for x, y in zip(a + [""] * len(b), b, strict=False) if x != y), "")
        diffs.append({"cell": index, "verdict": verdict, "fresh": first[:300]})
    return diffs


def notebook_worker(chapter: Path, executed: Path, timeout: int) -> None:
    """Execute ``chapter`` (a .ipynb) from book/ and write the executed copy."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(chapter, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(chapter.parent)}}).execute()
    nbformat.write(nb, executed)


def stage_notebooks(clock: Clock, log: Log, folder: Path, device: str, dry_run: bool) -> dict:
    missing = [p for p in NOTEBOOK_PACKAGES if not _importable(p)]
    if missing:
        log(f"notebooks: skipped, missing {', '.join(missing)} (carry them as wheels)")
        return {"status": "skipped", "why": f"missing {', '.join(missing)}"}
    chapters = [REPO / "book" / f"{name}.ipynb" for name in CHAPTERS]
    if dry_run:
        chapters = [_tiny_notebook(folder)]
    report = {}
    for chapter in chapters:
        executed = folder / f"executed-{chapter.stem}.ipynb"
        log(f"notebooks: executing {chapter.name} on {device}")
        command = [sys.executable, str(Path(__file__).resolve()), "--notebook-worker",
                   str(chapter), "--executed", str(executed)]
        result = run_stage(command, clock.budget("notebooks"), log, child_env(device))
        result.pop("stdout", None)
        if executed.exists():
            committed = json.loads(chapter.read_text())
            result["differences"] = compare_notebooks(committed, json.loads(executed.read_text()))
            kinds = [d["verdict"] for d in result["differences"]]
            log(f"notebooks: {chapter.name}: {len(kinds)} cells differ "
                f"({kinds.count('device and rounding')} only in device names and rounding)")
        report[chapter.stem] = result
    return report


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _tiny_notebook(folder: Path) -> Path:
    """Two cells whose committed outputs the dry run can reproduce (one exactly, one only
    up to the device name), to exercise the execution and the comparison."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("print(1 + 1)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="2\n")]),
        nbformat.v4.new_code_cell("print('device: cpu')", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="device: cuda:0\n")]),
    ]
    path = folder / "dry-run.ipynb"
    nbformat.write(nb, path)
    return path


# ------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=570.0,
                        help="seconds for the whole check (default 570)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the same stages on the CPU at tiny sizes (no GPU needed)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="folder for gpu_check.log and summary.json (default: a temporary one)")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results",
                        help="folder for cuda.md (the dry run writes to --log-dir instead)")
    parser.add_argument("--benchmark-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--notebook-worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--executed", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.benchmark_worker:
        benchmark_worker(args.device, args.dry_run, args.rows)
        return 0
    if args.notebook_worker:
        notebook_worker(args.notebook_worker, args.executed, timeout=600)
        return 0

    import torch

    if not torch.cuda.is_available() and not args.dry_run:
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False): nothing to "
              "measure; scripts/gpu_check.sh --dry-run runs the check's logic on the CPU")
        return 0
    device = "cpu" if args.dry_run else "cuda"
    folder = args.log_dir or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    results = folder if args.dry_run else args.results
    clock, log = Clock(args.time_limit), Log(folder)
    log(f"gpu check on {device}{' (dry run, tiny sizes)' if args.dry_run else ''}: "
        f"{args.time_limit:.0f} s in all; log in {folder}")
    summary = {"device": device, "dry_run": args.dry_run, "time_limit_s": args.time_limit}
    if device == "cuda":
        summary["gpu"] = torch.cuda.get_device_name(0)
        summary["torch"] = torch.__version__
    summary["tests"] = stage_tests(clock, log, folder, args.dry_run)
    summary["benchmarks"] = stage_benchmarks(clock, log, folder, device, args.dry_run, results)
    summary["notebooks"] = stage_notebooks(clock, log, folder, device, args.dry_run)
    summary["seconds"] = round(args.time_limit - clock.left(), 1)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"done in {summary['seconds']} s; summary in {folder / 'summary.json'}")
    failed = summary["tests"].get("failed", 0) + summary["tests"].get("errors", 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
