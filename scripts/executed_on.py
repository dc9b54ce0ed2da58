"""The processor the chapters' committed outputs were computed on: a diagnostic.

The last digits of float arithmetic depend on the processor's vector instructions (PyTorch and
MKL pick their kernels by them), and a model trained for a few hundred steps amplifies them. The
chapters therefore print only the digits that survive another rounding, and `make test` checks
them on a perturbed floating-point path (``perturbed_path`` in ``tests/test_colab_like.py``).
``make notebooks`` records here where each chapter was executed (``book/_executed_on.json``), and a
failing chapter's message quotes it, so that a report from another machine says where both runs
came from. It is not a reason for a red run: an output that moves with the processor shows too
many digits.

    python scripts/executed_on.py book/_executed_on.json book/06_encoder_decoder.ipynb ...
"""
import json
import platform
import sys
from pathlib import Path


def signature() -> dict:
    """This machine's processor model and the kernels PyTorch dispatches to on it."""
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in
             (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    return {"processor": names[0] if names else platform.processor() or platform.machine(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def differs_note(record: Path, notebook: str, here: dict) -> str:
    """A line for a failure message: where ``notebook``'s outputs were computed, and here."""
    recorded = json.loads(record.read_text()).get(notebook) if record.exists() else None
    if recorded is None:
        return f"(No record of where {notebook} was executed; this machine: {here}.)"
    if recorded == here:
        return f"(Its committed outputs came from the same kind of processor as this one: {here}.)"
    return f"(Its committed outputs came from {recorded}; this machine is {here}.)"


if __name__ == "__main__":
    record, notebooks = Path(sys.argv[1]), [Path(p).name for p in sys.argv[2:]]
    entries = json.loads(record.read_text()) if record.exists() else {}
    here = signature()
    entries.update({name: here for name in notebooks})
    record.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    print(f"{record}: {', '.join(notebooks)} executed on {here}")
