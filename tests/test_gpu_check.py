"""scripts/gpu_check.sh: its dry run on the CPU exercises every stage, so the script cannot rot
before a GPU is at hand; its comparison of notebook outputs is checked on planted cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_check  # noqa: E402

ENV = {**os.environ, "PYTHON": sys.executable}


@pytest.mark.slow
def test_dry_run_runs_every_stage_and_writes_its_report(tmp_path):
    done = subprocess.run([str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--log-dir",
                           str(tmp_path), "--time-limit", "400"],
                          capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["device"] == "cpu" and summary["dry_run"] is True
    # 1. the CUDA tests were collected and, on the CPU, skipped (none failed)
    tests = summary["tests"]
    assert tests["status"] == "ok" and tests["failed"] == tests["errors"] == 0
    assert tests["skipped"] >= 1
    # 2. every benchmark of the plan wrote its rows: 2 per transformer run, 3 per attention
    #    length, 1 per decoding length
    benchmarks = summary["benchmarks"]
    assert benchmarks["status"] == "ok" and benchmarks["rows"] == 2 + 2 + 3 + 1
    table = (tmp_path / "cuda.md").read_text()
    assert "aiayn / torch.nn.Transformer: training step (bfloat16, autocast)" in table
    assert "greedy decoding: uncached / cached" in table
    assert not (REPO / "benchmarks" / "results" / "cuda-dry-run.md").exists()
    # 3. the notebook was executed and its one cell that differs only by the device found
    notebook = summary["notebooks"]["dry-run"]
    assert notebook["status"] == "ok"
    assert notebook["differences"] == [
        {"cell": 1, "verdict": "device and rounding", "fresh": "device: cpu\n"}]
    # 4. the log holds every stage's progress
    log = (tmp_path / "gpu_check.log").read_text()
    for stage in ("tests:", "benchmarks:", "notebooks:", "done in"):
        assert stage in log


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_0():
    done = subprocess.run([str(REPO / "scripts" / "gpu_check.sh")], capture_output=True,
                          text=True, timeout=120, env=ENV)
    assert done.returncode == 0
    assert done.stdout.count("\n") == 1 and "no CUDA device" in done.stdout


def test_a_stage_past_its_time_is_stopped(tmp_path):
    log = gpu_check.Log(tmp_path)
    result = gpu_check.run_stage([sys.executable, "-c", "import time; time.sleep(30)"], 1, log)
    assert result["status"] == "timed out" and result["seconds"] < 10
    assert gpu_check.run_stage(["true"], 0.5, log)["status"] == "skipped"
    clock = gpu_check.Clock(1000)
    assert clock.budget("tests") == gpu_check.STAGE_CAPS["tests"]
    assert gpu_check.Clock(3).budget("benchmarks") == 0


@pytest.mark.parametrize(("committed", "fresh", "verdict"), [
    ("loss 0.812\n", "loss 0.812\n", "same"),
    ("device: cpu\n", "device: cuda:0\n", "device and rounding"),
    ("exact match 0.812\n", "exact match 0.813\n", "device and rounding"),  # last digit
    ("exact match 0.812\n", "exact match 0.850\n", "different"),
    ("3 steps\n", "4 steps\n", "different"),  # a count is not rounded
    ("tensor([1, 2])\n", "tensor([1, 2, 3])\n", "different"),
])
def test_outputs_are_classified(committed, fresh, verdict):
    assert gpu_check.classify(committed, fresh) == verdict


def test_notebook_comparison_follows_nbval():
    def cell(text, tags=()):
        return {"cell_type": "code", "metadata": {"tags": list(tags)},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}

    committed = {"cells": [cell("took 3.2 s\n", ["nbval-ignore-output"]),
                           cell("at 0x7f00aa\n"), cell("ok\n"), cell("0.50\n")]}
    fresh = {"cells": [cell("took 1.1 s\n", ["nbval-ignore-output"]),
                       cell("at 0x5511bb\n"), cell("ok\n"), cell("0.75\n")]}
    # the timing cell is skipped and the address sanitized, as nbval does; 0.50 -> 0.75 is not
    assert gpu_check.compare_notebooks(committed, fresh) == [
        {"cell": 3, "verdict": "different", "fresh": "0.75\n"}]


def test_the_cuda_test_files_are_found():
    files = gpu_check.cuda_test_files()
    assert "tests/test_attention.py" in files and "tests/test_distributed.py" in files
