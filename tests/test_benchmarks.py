"""benchmarks/run.py on tiny sizes: the benchmarks are not timed tests, but they must run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_torch_transformer_copy_matches_ours(bench):
    torch.manual_seed(0)
    ours = bench.Stacks(16, 2, 32, 2)
    theirs = bench.torch_transformer(ours)  # aiayn.inspection's bridge
    src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    assert bench.check_parity(ours, theirs, src, tgt) < 1e-5
    with torch.no_grad():
        theirs.decoder.layers[0].linear1.weight.mul_(1.1)
    with pytest.raises(AssertionError, match="outputs differ"):
        bench.check_parity(ours, theirs, src, tgt)


def test_benchmarks_run_on_tiny_sizes(bench, tmp_path, monkeypatch):
    rows = bench.bench_transformer(16, 2, 32, 1, batch=2, length=4, repeats=1, warmup=0)
    assert [r.benchmark for r in rows] == [
        "aiayn / torch.nn.Transformer: training step",
        "aiayn / torch.nn.Transformer: inference forward",
    ]
    assert all(float(r.ratio) > 0 for r in rows)
    rows += bench.bench_attention_paths((8,), 16, 2, repeats=1)
    assert len(rows) == 5 and float(rows[-2].ratio) > 1  # explicit keeps the weights
    rows += bench.bench_decoding((2,), d_model=16, n_layers=1, repeats=1)
    rows += bench.bench_training_to_accuracy(0.99, max_steps=10)
    assert "NOT reached within 10 steps" in rows[-1].note  # 10 steps cannot do it
    assert rows[-1].first.endswith(" s (1 run)")  # one run: no median to give
    assert float(rows[-1].first.removesuffix(" s (1 run)")) > 0
    text = bench.to_markdown(rows, bench.machine_info(torch.device("cpu")), ["a note"])
    assert text.startswith("# Benchmarks on cpu") and "- a note" in text
    assert text.count("\n| ") == len(rows) + 2  # header, rule, rows
    monkeypatch.setattr(bench, "run_all", lambda device, quick: rows)  # ran above
    path = bench.main(["--quick", "--out", str(tmp_path)])
    assert path.name == "cpu-quick.md" and "| aiayn / torch.nn" in path.read_text()


def test_device_slug(bench):
    assert bench.device_slug(torch.device("cpu")) == "cpu"


def test_a_time_says_how_many_runs_it_is_the_median_of(bench):
    assert bench._fmt_time((0.002, 0.001, 0.003), 5) == "2.00 ms (1.00-3.00, 5 runs)"
    assert bench._fmt_time((5.0, 5.0, 5.0), 1) == "5000.00 ms (1 run)"  # no range of one run


def test_gpu_section_of_the_performance_page(tmp_path):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "_ext" / "gpu_results.py"
    spec = importlib.util.spec_from_file_location("gpu_results", path)
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    missing = tmp_path / "cuda.md"
    assert ext.gpu_section(missing).startswith("**Not measured yet.**")
    missing.write_text("# Benchmarks on NVIDIA H200\n\n| table |\n")
    assert ext.gpu_section(missing) == (
        "```{include} ../benchmarks/results/cuda.md\n:start-line: 2\n```")
    page = (Path(__file__).resolve().parents[1] / "book" / "performance.md").read_text()
    assert ext.MARKER in page


def test_training_step_flops_count_each_stack_on_its_own_tokens(bench):
    """The MFU's numerator: each position passes through its own stack only. The counted FLOPs
    of a training step are about three times the forward's, about 6 (P_enc n_src + P_dec n_tgt) plus
    attention's products, and half of 6 P (n_src + n_tgt), the rule of thumb the page once used."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    d, h, d_ff, n = 64, 4, 256, 2
    stacks = bench.Stacks(d, h, d_ff, n)
    src, tgt = torch.randn(2, 32, d), torch.randn(2, 32, d)
    step = bench.training_step_flops(stacks, src, tgt)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        stacks(src, tgt)
    forward = counter.get_total_flops()
    # backward: two products per product, less the input gradients of the first layers
    # (src and tgt need none)
    assert 2.8 * forward < step <= 3 * forward
    assert all(p.grad is None for p in stacks.parameters())  # it leaves no gradients behind
    p_enc = sum(p.numel() for p in stacks.encoder.parameters())
    p_dec = sum(p.numel() for p in stacks.decoder.parameters())
    own_stack = 6 * (p_enc * src[..., 0].numel() + p_dec * tgt[..., 0].numel())
    # about: biases and LayerNorm are parameters without products, attention has products
    # without parameters
    assert 0.85 < step / own_stack < 1.3
    both_stacks = 6 * (p_enc + p_dec) * (src[..., 0].numel() + tgt[..., 0].numel())
    assert both_stacks / step > 1.5  # the rule of thumb counts every token through both stacks


def test_mfu_uses_the_peak_of_the_dtype_the_products_ran_in(bench, monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(bench, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    assert bench._mfu_note(494.5e12, 1.0, cpu, torch.bfloat16) == "; MFU 50.0% of the bfloat16 peak"
    assert bench._mfu_note(33.5e12, 1.0, cpu, None) == "; MFU 50.0% of the float32 peak"
    assert bench._mfu_note(1e12, 1.0, cpu, torch.float16) == ""  # no float16 peaks listed
    monkeypatch.setattr(bench, "device_name", lambda device: "Tesla T4")
    assert bench._mfu_note(1e12, 1.0, cpu, torch.bfloat16) == ""  # no bf16 tensor cores
    assert bench._mfu_note(4.05e12, 1.0, cpu, None) == "; MFU 50.0% of the float32 peak"


@pytest.mark.parametrize("name, dtype, peak", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989e12),
    ("NVIDIA H200", "float32", 67e12),
    ("NVIDIA A100-SXM4-40GB", "bfloat16", 312e12),
    ("NVIDIA L4", "float32", 30.3e12),
    ("Tesla T4", "float32", 8.1e12),
    ("NVIDIA L40S", "bfloat16", None),  # not the L4
    ("NVIDIA L40", "float32", None),
    ("NVIDIA H100 PCIe", "bfloat16", None),  # slower than the SXM board listed
    ("NVIDIA H100 NVL", "bfloat16", None),
    ("NVIDIA H200 NVL", "float32", None),
    ("Tesla T4", "bfloat16", None),  # no bf16 entry
])
def test_board_peak_matches_whole_board_names_only(bench, name, dtype, peak):
    assert bench.board_peak(name, dtype) == peak
