"""Benchmarks: our code against torch.nn, and our code paths against each other.

Run all of them (about 5 minutes on two CPU cores)::

    .venv/bin/python benchmarks/run.py            # writes benchmarks/results/<device>.md
    .venv/bin/python benchmarks/run.py --quick    # tiny sizes, seconds (a smoke test)

Every timing is the median of the runs after warm-up, with the spread (min-max) and the
number of runs.
Outputs are checked for parity before anything is timed. Not part of ``make test``;
``tests/test_benchmarks.py`` runs these functions on tiny sizes so they do not rot.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import inspect
import platform
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from aiayn import Decoder, Encoder, MultiHeadAttention, causal_mask
from aiayn.experiments.measurement import peak_memory_bytes, saved_tensor_bytes, time_stats
from aiayn.inspection import torch_transformer

RESULTS = Path(__file__).resolve().parent / "results"

# Dense peak FLOP/s of a few GPUs, for the model FLOP utilisation (MFU), from NVIDIA's data sheets
# (SXM boards for H100 and H200; an H100 PCIe is slower, 756 bf16 and 51 float32 TFLOP/s).
# float32: the CUDA cores, as PyTorch runs float32 matrix products by default (TF32 off).
# The T4 has no bf16 tensor cores (its 65 TFLOP/s are float16), so it has no bf16 entry.
PEAK_FLOPS = {
    "bfloat16": {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12},
    "float32": {"H100": 67e12, "H200": 67e12, "A100": 19.5e12, "L4": 30.3e12, "T4": 8.1e12},
}


@dataclass
class Row:
    """One line of the results table: a measured pair (ours, reference) or a note."""

    benchmark: str
    setting: str
    first: str = ""  # A: the first thing the benchmark's name mentions
    second: str = ""  # B: the second
    ratio: str = ""  # A / B
    note: str = ""


# ------------------------------------------------------------------------- the machine


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    """A readable name: "cpu", or the GPU's name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def device_slug(device: torch.device) -> str:
    """File-name form of :func:`device_name`: "cpu", "nvidia-h100-80gb-hbm3", ..."""
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def machine_info(device: torch.device) -> dict[str, str]:
    """What the numbers were measured on."""
    return {
        "device": device_name(device),
        "CPU": cpu_model(),
        "threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }


def _fmt_time(stats: tuple[float, float, float], runs: int) -> str:
    """"median ms (min-max, N runs)"; a single run is shown as what it is."""
    median, low, high = stats
    if runs == 1:
        return f"{median * 1e3:.2f} ms (1 run)"
    return f"{median * 1e3:.2f} ms ({low * 1e3:.2f}-{high * 1e3:.2f}, {runs} runs)"


def _fmt_bytes(nbytes: int) -> str:
    if nbytes < 2**20:
        return f"{nbytes / 2**10:.1f} KiB"
    return f"{nbytes / 2**20:.1f} MiB"


def time_interleaved(fns: dict, repeats: int = 5, warmup: int = 2) -> dict:
    """``{name: [seconds of each run]}``, the functions called in turn (a, b, a, b, ...)
    so that a burst of load from another process slows both, not one of them."""
    times: dict = {name: [] for name in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            seconds = time_stats(fn, repeats=1, warmup=0)[0]
            if i >= warmup:
                times[name].append(seconds)
    return times


def _stats(times: list[float]) -> tuple[float, float, float]:
    return statistics.median(times), min(times), max(times)


# ------------------------------------------------- 1. aiayn against torch.nn.Transformer


class Stacks(nn.Module):
    """Our encoder and decoder stacks, called like ``torch.nn.Transformer`` (no embeddings)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int):
        super().__init__()
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff, dropout=0.0)
        self.decoder = Decoder(n_layers, d_model, n_heads, d_ff, dropout=0.0)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        tgt_mask = causal_mask(tgt.shape[1], device=tgt.device)  # True = may attend
        return self.decoder(tgt, self.encoder(src), tgt_mask)


def _torch_call(theirs: nn.Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
    return theirs(src, tgt, tgt_mask=mask, tgt_is_causal=True)


def check_parity(ours: Stacks, theirs: nn.Transformer, src, tgt, atol: float = 1e-4) -> float:
    """Largest absolute difference of the outputs (train and eval modes); raises if > atol."""
    worst = 0.0
    for training in (True, False):
        ours.train(training), theirs.train(training)
        with torch.no_grad():
            diff = (ours(src, tgt) - _torch_call(theirs, src, tgt)).abs().max().item()
        worst = max(worst, diff)
    if not worst <= atol:
        raise AssertionError(f"outputs differ by {worst:.2e} > {atol:.0e}: no timing")
    return worst


def _train_step(model, call, optimizer, src, tgt, target, autocast_dtype=None):
    device_type = src.device.type
    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        out = call(src, tgt)
    loss = (out.float() - target).square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _inference(call, src, tgt, autocast_dtype=None):
    with torch.no_grad(), torch.autocast(src.device.type, dtype=autocast_dtype,
                                         enabled=autocast_dtype is not None):
        call(src, tgt)


def bench_transformer(
    d_model: int = 512, n_heads: int = 8, d_ff: int = 2048, n_layers: int = 2,
    batch: int = 8, length: int = 64, device: torch.device | str = "cpu",
    repeats: int = 5, autocast_dtype: torch.dtype | None = None, warmup: int = 2,
) -> list[Row]:
    """Training step (forward, backward, Adam) and inference forward, ours / torch.nn.

    Same configuration, copied weights, dropout 0 (so the outputs can be compared),
    Post-LN, a causal mask on the target. Returns two rows.
    """
    device = torch.device(device)
    torch.manual_seed(0)
    ours = Stacks(d_model, n_heads, d_ff, n_layers)
    theirs = torch_transformer(ours)
    ours, theirs = ours.to(device), theirs.to(device)
    src = torch.randn(batch, length, d_model, device=device)
    tgt = torch.randn(batch, length, d_model, device=device)
    target = torch.randn(batch, length, d_model, device=device)
    err = check_parity(ours, theirs, src, tgt)
    setting = f"d={d_model}, h={n_heads}, d_ff={d_ff}, N={n_layers}+{n_layers}, B={batch}, n={length}"
    tag = "" if autocast_dtype is None else f" ({autocast_dtype}, autocast)".replace("torch.", "")
    rows = []
    calls = {"ours": ours, "torch": lambda s, t: _torch_call(theirs, s, t)}
    models = {"ours": ours, "torch": theirs}
    optimizers = {name: torch.optim.Adam(models[name].parameters(), lr=1e-4)
                  for name in models}

    def train_fn(name):
        return lambda: _train_step(models[name], calls[name], optimizers[name], src, tgt,
                                   target, autocast_dtype)

    def infer_fn(name):
        return lambda: _inference(calls[name], src, tgt, autocast_dtype)

    for model in models.values():
        model.train()
    train = time_interleaved({n: train_fn(n) for n in models}, repeats, warmup)
    for model in models.values():
        model.eval()
    infer = time_interleaved({n: infer_fn(n) for n in models}, repeats, warmup)
    tokens = 2 * batch * length  # source + target positions
    for label, runs in (("training step", train), ("inference forward", infer)):
        stats = {name: _stats(t) for name, t in runs.items()}
        # The median of the ratios of runs made back to back: steadier than a ratio
        # of medians when the machine is shared.
        ratio = statistics.median(a / b for a, b in zip(runs["ours"], runs["torch"],
                                                        strict=True))
        note = f"parity max abs diff {err:.1e}; ratio: median of paired runs"
        if device.type == "cuda":
            note += f"; ours {tokens / stats['ours'][0]:,.0f} tokens/s"
            if label == "training step":
                flops = training_step_flops(ours, src, tgt, autocast_dtype)
                note += _mfu_note(flops, stats["ours"][0], device, autocast_dtype)
        rows.append(Row(f"aiayn / torch.nn.Transformer: {label}{tag}", setting,
                        _fmt_time(stats["ours"], repeats), _fmt_time(stats["torch"], repeats), f"{ratio:.3f}",
                        note))
    return rows


def training_step_flops(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                        autocast_dtype: torch.dtype | None = None) -> int:
    """The FLOPs of the matrix products (attention's included) of one training step of ``model``
    on ``src`` and ``tgt``, forward and backward, counted by PyTorch's ``FlopCounterMode``.

    Each position passes only through its own stack, the source through the encoder and the target
    through the decoder, so this is about ``6 (P_enc n_src + P_dec n_tgt)`` plus attention's
    products: half of the ``6 P (n_src + n_tgt)`` of the rule of thumb, with ``P`` both stacks'
    parameters (tests/test_benchmarks.py compares them)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        with torch.autocast(src.device.type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            out = model(src, tgt)
        out.float().square().mean().backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def board_peak(name: str, dtype: str) -> float | None:
    """The dense peak of ``PEAK_FLOPS`` for a GPU named ``name``, or None when the name is not
    exactly one of its boards: a key must stand as a whole word ("L4" is not "L40S"), and the
    PCIe and NVL versions of a board, slower than the SXM figures listed, get no peak."""
    if re.search(r"\b(PCIe|NVL)\b", name, re.IGNORECASE):
        return None
    return next((v for k, v in PEAK_FLOPS[dtype].items()
                 if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", name)), None)


def _mfu_note(flops: int, seconds: float, device: torch.device,
              autocast_dtype: torch.dtype | None) -> str:
    """Model FLOP utilisation: the step's counted FLOPs per second, over the GPU's dense peak for
    the dtype the products ran in (nothing where the peak is not known)."""
    dtype = "bfloat16" if autocast_dtype is torch.bfloat16 else "float32"
    if autocast_dtype not in (None, torch.bfloat16):
        return ""
    name = device_name(device)
    peak = board_peak(name, dtype)
    if peak is None:
        return ""
    return f"; MFU {flops / seconds / peak:.1%} of the {dtype} peak"


# ------------------------------------------------------- 2. fused against explicit attention


def bench_attention_paths(
    lengths: tuple[int, ...] = (256, 1024, 4096), d_model: int = 512, n_heads: int = 8,
    device: torch.device | str = "cpu", repeats: int = 3,
) -> list[Row]:
    """``MultiHeadAttention`` forward, explicit path (``need_weights=True``) / fused path:
    time (no grad), peak memory of the forward, and bytes saved for backward."""
    device = torch.device(device)
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, n_heads).to(device).eval()
    rows = []
    for n in lengths:
        x = torch.randn(1, n, d_model, device=device)

        def explicit(x=x):
            return mha(x, x, x, need_weights=True)[0]

        def fused(x=x):
            return mha(x, x, x)

        with torch.no_grad():
            torch.testing.assert_close(explicit(), fused(), atol=1e-4, rtol=1e-4)
            t_exp = time_stats(explicit, repeats=repeats, warmup=1)
            t_fus = time_stats(fused, repeats=repeats, warmup=1)
            m_exp = peak_memory_bytes(explicit, device=device)
            m_fus = peak_memory_bytes(fused, device=device)
        s_exp, s_fus = saved_tensor_bytes(explicit), saved_tensor_bytes(fused)
        setting = f"n={n}, d={d_model}, h={n_heads}, B=1"
        rows.append(Row("attention: explicit / fused, time", setting, _fmt_time(t_exp, repeats),
                        _fmt_time(t_fus, repeats), f"{t_exp[0] / t_fus[0]:.2f}", "forward, no grad"))
        rows.append(Row("attention: explicit / fused, peak memory", setting,
                        _fmt_bytes(m_exp), _fmt_bytes(m_fus), f"{m_exp / max(m_fus, 1):.1f}",
                        "forward; tensors allocated by operations" if device.type == "cpu"
                        else "forward; torch.cuda.max_memory_allocated"))
        rows.append(Row("attention: explicit / fused, saved for backward", setting,
                        _fmt_bytes(s_exp), _fmt_bytes(s_fus), f"{s_exp / max(s_fus, 1):.1f}",
                        "saved_tensors_hooks, parameters included"))
    return rows


# ------------------------------------------------------------- 3. cached greedy decoding


def _find_cached_greedy():
    """``aiayn.learning.decode``'s greedy decoder, if it exists and takes a cache switch."""
    if importlib.util.find_spec("aiayn.learning.decode") is None:
        return None, "aiayn.learning.decode does not exist yet"
    module = importlib.import_module("aiayn.learning.decode")
    fn = getattr(module, "greedy_decode", None)
    if fn is None:
        return None, "aiayn.learning.decode has no greedy_decode"
    params = inspect.signature(fn).parameters
    switch = next((p for p in ("use_cache", "cache") if p in params), None)
    if switch is None:
        return None, "aiayn.learning.decode.greedy_decode has no use_cache switch"
    return (fn, switch), ""


def bench_decoding(*args, **kwargs) -> list[Row]:
    """Greedy decoding with cached keys/values / without; a row that says why if
    ``aiayn.learning.decode`` (written in parallel with this script) is missing or fails."""
    try:
        return _bench_decoding(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - report, do not lose the other rows
        return [Row("greedy decoding: uncached / cached", "-",
                    note=f"failed: {type(error).__name__}: {error}")]


def _bench_decoding(steps: tuple[int, ...] = (32, 128, 512), d_model: int = 256,
                   n_layers: int = 2, device: torch.device | str = "cpu",
                   repeats: int = 3) -> list[Row]:
    """Greedy decoding with cached keys/values / without, for ``steps`` new tokens."""
    found, why = _find_cached_greedy()
    if found is None:
        return [Row("greedy decoding: uncached / cached", "-", note=f"skipped: {why}")]
    fn, switch = found
    from aiayn import Transformer, TransformerConfig

    device = torch.device(device)
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab=64, tgt_vocab=64, d_model=d_model, n_heads=4,
                               n_layers=n_layers, d_ff=4 * d_model, dropout=0.0,
                               max_len=max(steps) + 34)
    model = Transformer(config).to(device).eval()
    src = torch.randint(1, 64, (1, 32), device=device)
    params = inspect.signature(fn).parameters
    length_kw = next((p for p in ("max_len", "max_new_tokens", "n_tokens", "steps")
                      if p in params), None)
    if length_kw is None:
        return [Row("greedy decoding: uncached / cached", "-",
                    note="skipped: greedy_decode has no length argument this script knows")]
    # <eos> = -1 is never generated, so every run makes exactly n tokens.
    ids = {k: v for k, v in (("bos_id", 1), ("eos_id", -1)) if k in params}
    rows = []
    for n in steps:
        kw = {length_kw: n, **ids}
        with torch.no_grad():
            slow = fn(model, src, **kw, **{switch: False})
            fast = fn(model, src, **kw, **{switch: True})
            same = torch.equal(getattr(slow, "tokens", slow), getattr(fast, "tokens", fast))
            # The runs above were the warm-up; long uncached runs take seconds each, so fewer.
            reps = repeats if n <= 128 else min(repeats, 2)
            t_slow = time_stats(fn, model, src, **kw, **{switch: False}, repeats=reps,
                                warmup=0)
            t_fast = time_stats(fn, model, src, **kw, **{switch: True}, repeats=repeats,
                                warmup=0)
        rows.append(Row("greedy decoding: uncached / cached", f"{n} tokens, d={d_model}",
                        _fmt_time(t_slow, reps), _fmt_time(t_fast, repeats),
                        f"{t_slow[0] / t_fast[0]:.2f}",
                        "same tokens" if same else "TOKENS DIFFER"))
    return rows


# --------------------------------------------------------- 5. training to 99% exact match


def bench_training_to_accuracy(target: float = 0.99, max_steps: int = 5000,
                               device: torch.device | str = "cpu",
                               threads: int | None = 1) -> list[Row]:
    """Wall-clock training time until chapter 7's model reaches ``target`` exact match on
    the held-out dates (greedy, current weights, checked every 100 steps; the checks
    are not timed). One thread on a CPU, as in chapter 7."""
    from aiayn.learning.recipes import train_to_accuracy

    device = torch.device(device)
    run = train_to_accuracy(target, max_steps=max_steps, device=device,
                            threads=threads if device.type == "cpu" else None)
    reached = run["exact"] >= target
    note = (f"exact match {run['exact']:.4f} after {run['steps']} steps (greedy, current "
            "weights, checked every 100 steps)"
            + ("" if reached else f": target {target} NOT reached within {max_steps} steps"))
    return [Row(f"training to {target:.0%} exact match (chapter 7 task)",
                "d=64, h=4, N=2+2, batch 128, warm-up 300", f"{run['seconds']:.1f} s (1 run)",
                note=note)]


# ------------------------------------------------------------------------------- report


def to_markdown(rows: list[Row], info: dict[str, str], notes: list[str]) -> str:
    """The results page: the machine, then one table row per measurement."""
    lines = [f"# Benchmarks on {info['device']}", ""]
    lines += [f"- **{k}**: {v}" for k, v in info.items()]
    lines += [f"- {n}" for n in notes]
    lines += ["", "Times: median of the runs after warm-up, (min-max, number of runs) in brackets; "
              "a time marked (1 run) is a single run. "
              "Each benchmark is named \"A / B\"; the ratio is A / B, so below 1 means "
              "A is faster (or smaller).", ""]
    lines.append("| benchmark (A / B) | setting | A | B | A / B | note |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cells = [r.benchmark, r.setting, r.first, r.second, r.ratio, r.note]
        lines.append("| " + " | ".join(c.replace("|", "/") or "-" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def run_all(device: torch.device, quick: bool = False) -> list[Row]:
    """Every benchmark, small sizes when ``quick``."""
    if quick:
        rows = bench_transformer(64, 4, 128, 1, batch=2, length=8, device=device, repeats=2)
        rows += bench_attention_paths((16, 32), 32, 4, device=device, repeats=2)
        rows += bench_decoding((4, 8), d_model=32, n_layers=1, device=device, repeats=2)
        return rows + bench_training_to_accuracy(0.5, max_steps=100, device=device)
    rows = bench_transformer(device=device, repeats=10)
    if device.type == "cuda":
        rows += bench_transformer(n_layers=6, batch=32, length=256, device=device)
        rows += bench_transformer(n_layers=6, batch=32, length=256, device=device,
                                  autocast_dtype=torch.bfloat16)
    rows += bench_attention_paths(device=device)
    rows += bench_decoding(device=device)
    return rows + bench_training_to_accuracy(device=device)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the best)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for <device>.md")
    parser.add_argument("--note", action="append", default=[],
                        help="a line to add under the machine (repeatable)")
    args = parser.parse_args(argv)
    from aiayn import get_device

    device = torch.device(args.device) if args.device else get_device()
    info = machine_info(device)
    print("\n".join(f"{k}: {v}" for k, v in info.items()), flush=True)
    rows = run_all(device, quick=args.quick)
    text = to_markdown(rows, info, args.note)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{device_slug(device)}{'-quick' if args.quick else ''}.md"
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return path


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
