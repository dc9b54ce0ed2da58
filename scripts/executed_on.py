"""The processor the chapters' committed outputs were computed on.

Strict nbval compares every output digit for digit, and the last digits of float arithmetic
depend on the processor's vector instructions (PyTorch and MKL pick their kernels by them):
a chapter that trains a model reproduces its committed numbers only on a processor of the
same kind. ``make notebooks`` records the kind per chapter in ``book/_executed_on.json``;
``tests/test_colab_like.py`` names both when a chapter's outputs differ.

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
        return f"(no record of where {notebook} was executed; this machine: {here})"
    if recorded == here:
        return f"(the same kind of processor as the committed outputs: {here})"
    return (f"{notebook}'s committed outputs were computed on {recorded}, this machine is "
            f"{here}: on another kind of processor the last digits of trained models differ. "
            "If that is the only difference, re-execute the chapter here (`make notebooks`).")


if __name__ == "__main__":
    record, notebooks = Path(sys.argv[1]), [Path(p).name for p in sys.argv[2:]]
    entries = json.loads(record.read_text()) if record.exists() else {}
    here = signature()
    entries.update({name: here for name in notebooks})
    record.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    print(f"{record}: {', '.join(notebooks)} executed on {here}")
