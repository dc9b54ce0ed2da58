"""PyTorch's own distributed engine, and checkpoints that survive a crash.

:func:`init_distributed` joins the process group that ``torchrun`` describes in
environment variables (``env://``): NCCL on GPUs, gloo on CPUs. Without
``torchrun`` it returns a single-process context, so one command serves both.

Checkpoints are written atomically (:func:`atomic_save`: a temporary file in the
same folder, flushed and ``fsync``-ed, then renamed over the target with
``os.replace``), so a crash mid-write leaves the previous checkpoint intact;
:func:`save_rotating` keeps the last ``K``. :func:`rng_states` and
:func:`set_rng_states` carry every random generator a run uses across a restart, and
:func:`deterministic_algorithms` selects kernels that repeat themselves exactly, which
a resumed run on a GPU needs to continue bit for bit. :func:`file_sha256` fingerprints
the data a checkpoint was trained on.

Work that takes long and must happen once, such as learning a BPE vocabulary on
the whole corpus, is done *before* the process group is created: rank 0 writes its
result atomically and the others wait for the file (:func:`wait_for_file`), under
their own timeout and with a message that says what they wait for, rather than in
a collective call that would hit the process group's timeout (10 or 30 minutes).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "DistContext",
    "process_layout",
    "init_distributed",
    "wait_for_file",
    "deterministic_algorithms",
    "file_sha256",
    "cleanup_distributed",
    "all_reduce_sum",
    "atomic_save",
    "save_rotating",
    "list_checkpoints",
    "latest_checkpoint",
    "rng_states",
    "set_rng_states",
]

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)\.pt$")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a run: ``rank`` of ``world_size`` processes,
    ``local_rank`` on its machine, the ``device`` it trains on, the ``backend``
    (``"nccl"``, ``"gloo"``, or ``None`` for a single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that logs and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group was initialised."""
        return self.backend is not None


def process_layout() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` as ``torchrun`` sets them in the environment
    (``0, 1, 0`` without it), known before any process group exists."""
    return (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
            int(os.environ.get("LOCAL_RANK", "0")))


def init_distributed(device: str = "auto") -> DistContext:
    """Join the process group described by ``torchrun``'s environment variables.

    ``device``: ``"auto"`` (CUDA when available, else CPU), ``"cuda"`` or ``"cpu"``.
    With CUDA each process uses GPU ``LOCAL_RANK`` and NCCL; on the CPU, gloo. Without
    ``WORLD_SIZE`` in the environment (a plain ``python -m``), no group is created."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    rank, world_size, local_rank = process_layout()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if "WORLD_SIZE" not in os.environ:
        return DistContext(device=dev)
    backend = "nccl" if use_cuda else "gloo"
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend=backend, init_method="env://")
    return DistContext(rank, world_size, local_rank, dev, backend)


def cleanup_distributed(ctx: DistContext) -> None:
    """Leave the process group (a no-op for a single process)."""
    import torch.distributed as dist

    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(ctx: DistContext, values: list[float]) -> list[float]:
    """The sums over all ranks of a few numbers (unchanged for a single process)."""
    if not ctx.distributed:
        return list(values)
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def wait_for_file(path: str | Path, timeout: float, what: str = "the file",
                  more_time: str = "a longer timeout", poll: float = 0.5) -> Path:
    """Wait until ``path`` exists (rank 0 writes it atomically), at most ``timeout``
    seconds; return it. Raises ``TimeoutError`` naming ``what`` is awaited, the file, the
    time waited, the usual causes, and how to allow ``more_time``."""
    path = Path(path)
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"rank {process_layout()[0]} waited {timeout:g} s for rank 0 to write {what} "
                f"{path}: if rank 0 is still working, allow more time ({more_time}); if it "
                "failed, its error is above; on several machines, the folder must be one "
                "that every process sees (a shared file system)"
            )
        time.sleep(poll)
    return path


@contextmanager
def deterministic_algorithms(enabled: bool = True) -> Iterator[None]:
    """Within the block, run only kernels that give the same bits on every run.

    Sets ``torch.use_deterministic_algorithms(True)`` (an operation without a
    deterministic kernel raises rather than run a nondeterministic one),
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (which cuBLAS needs for repeatable matmuls; it
    must be set before the process's first CUDA matmul) and cuDNN's deterministic mode
    without autotuning. Restores the previous settings afterwards. On the CPU, PyTorch's
    kernels repeat themselves already; on a GPU this costs some speed. A no-op when
    ``enabled`` is false."""
    if not enabled:
        yield
        return
    from torch.backends import cudnn

    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             cudnn.deterministic, cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        cudnn.deterministic, cudnn.benchmark = saved[2], saved[3]
        if saved[4] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    """The SHA-256 of the bytes of ``path``, in hex (read in chunks of ``chunk`` bytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def atomic_save(obj, path: str | Path) -> None:
    """``torch.save(obj)`` to ``path`` so that ``path`` is never seen half-written.

    Writes a temporary file in the same folder (a rename is atomic only within one
    file system), flushes and ``fsync``-s it, renames it over ``path`` with
    :func:`os.replace`, then ``fsync``-s the folder so the rename itself is durable.
    If anything fails, the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename durable too
        dir_fd = os.open(path.parent, os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def list_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint_<step>.pt`` in ``directory``, oldest first.

    Temporary files of an interrupted write never match the pattern."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        match = CHECKPOINT_PATTERN.match(p.name)
        if match and p.is_file():
            found.append((int(match.group(1)), p))
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint of the highest step in ``directory``, or ``None``."""
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def save_rotating(obj, directory: str | Path, step: int, keep_last: int = 5) -> Path:
    """Write ``obj`` atomically as ``directory/checkpoint_<step>.pt`` and delete all but
    the ``keep_last`` newest checkpoints. Returns the new file's path."""
    if not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be a positive int, got {keep_last!r}")
    path = Path(directory) / f"checkpoint_{step:08d}.pt"
    atomic_save(obj, path)
    for _, old in list_checkpoints(directory)[:-keep_last]:
        old.unlink()
    return path


def rng_states() -> dict:
    """The states of Python's, NumPy's and PyTorch's (CPU and CUDA) global generators."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_states(states: dict) -> None:
    """Restore what :func:`rng_states` returned."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
