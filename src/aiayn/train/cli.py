"""``python -m aiayn.train``: the paper's training run, on one process or many.

One command for a laptop and for a machine with several GPUs::

    python -m aiayn.train --steps 2000 --max-tokens 4000     # the generated date task
    torchrun --nproc_per_node=8 -m aiayn.train --model base --max-tokens 3125 \
        --train-src train.en --train-tgt train.de \
        --valid-src newstest2013.en --valid-tgt newstest2013.de --out-dir runs/base

``--max-tokens`` is a cap **per process and per side**: a batch holds at most that many
*padded* source tokens and at most that many padded target tokens, and it closes when
either side would exceed it. One optimizer step therefore reads up to
``processes x --accum-steps x --max-tokens`` tokens per side, printed at start-up.
The paper's steps hold about 25000 per side (Section 5.1): 8 GPUs with
``--max-tokens 3125``, or 1 GPU with ``--max-tokens 3125 --accum-steps 8``; the
default 25000 is meant for one process. ``--tokens-per-step`` gives the total
instead and divides it for you.

What it does, step by step (:func:`main`): read the data (the generated date task, or
two aligned text files with a shared BPE vocabulary, :mod:`aiayn.train.subword`, learned by
rank 0 *before* the process group exists while the other ranks wait for its file);
join the process group that ``torchrun`` describes
(:func:`aiayn.train.distributed.init_distributed`); batch by token count
(:mod:`aiayn.train.batching`); train with the paper's recipe (label smoothing, Adam
0.9/0.98/1e-9, the warm-up schedule of :mod:`aiayn.learning.training`) under
``DistributedDataParallel``, with gradient accumulation and bf16 autocast where the GPU
supports it; evaluate now and then; and write checkpoints atomically, keeping the last
few. ``--resume`` continues from the latest, refusing a checkpoint of another config or
other data (it stores SHA-256 fingerprints of the training files and of the encoded
pairs); the run continues bit for bit on the CPU, and on CUDA it needs ``--deterministic``.
``python -m aiayn.train.translate`` (:mod:`aiayn.train.translate`) then uses the result.

The loss of one optimizer step is the label-smoothed cross-entropy summed over every
target token of every micro-batch on every rank, divided by their total number: so
``N`` ranks with ``accum_steps = a`` compute exactly the step that one process computes
on the ``N * a`` batches together. Dropout is seeded from the global batch number, so
even the dropout masks do not depend on how the batches are spread over processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .loop import PRESETS, load_data, train_loop

__all__ = ["build_parser", "main", "run"]


#: Padded tokens per side in one optimizer step of the paper (Section 5.1), and the default
#: --max-tokens of one process.
PAPER_TOKENS_PER_STEP = 25_000


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults, except the empty ones (None, False)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or action.help is None:
            return action.help
        return super()._get_help_string(action)


def build_parser():
    """The ``argparse.ArgumentParser`` of ``python -m aiayn.train`` (see ``--help``)."""
    p = argparse.ArgumentParser(
        prog="python -m aiayn.train",
        description="Train the Transformer of 'Attention Is All You Need' with the paper's recipe, "
        "on one process or under torchrun (DistributedDataParallel: NCCL on GPUs, gloo on CPUs).",
        epilog="Without --train-src/--train-tgt it trains on the generated date task of chapter 7. "
        "Several GPUs: torchrun --nproc_per_node=N -m aiayn.train ... with --max-tokens "
        f"{PAPER_TOKENS_PER_STEP} / N for the paper's {PAPER_TOKENS_PER_STEP} tokens per side "
        "and step (e.g. 8 GPUs: --max-tokens 3125). After a crash, run the same command again "
        "with --resume. Use the result with python -m aiayn.train.translate.",
        formatter_class=_HelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument("--train-src", type=Path, help="training source text, one sentence per line")
    data.add_argument("--train-tgt", type=Path, help="training target text, aligned with --train-src")
    data.add_argument("--valid-src", type=Path, help="held-out source text for evaluation")
    data.add_argument("--valid-tgt", type=Path, help="held-out target text, aligned with --valid-src")
    data.add_argument("--vocab-size", type=int, default=37_000,
                      help="size of the shared BPE vocabulary learned on the training files")
    data.add_argument("--max-len", type=int, default=256,
                      help="drop training pairs with a side longer than this many tokens "
                      "(with <bos>/<eos>)")
    data.add_argument("--n-train", type=int, default=200_000, help="date task: training pairs")
    data.add_argument("--n-valid", type=int, default=500, help="date task: held-out pairs")
    data.add_argument("--vocab-timeout", type=float, default=7200.0, metavar="SECONDS",
                      help="under torchrun, how long ranks 1.. wait for rank 0 to learn the "
                      "vocabulary (before the process group exists, so no collective times out)")
    model = p.add_argument_group("model (a preset, then overrides)")
    model.add_argument("--model", choices=sorted(PRESETS), default="tiny",
                       help="tiny: chapter 7's sizes, with dropout 0.1 (chapter 7 trains without); "
                       "base, big: the paper's Table 3")
    for flag in ("--d-model", "--n-heads", "--n-layers", "--d-ff"):
        model.add_argument(flag, type=int, help="override the preset")
    model.add_argument("--dropout", type=float, help="override the preset's P_drop")
    train = p.add_argument_group("training")
    train.add_argument("--max-tokens", type=int, default=None,
                       help="cap on one batch, PER PROCESS AND PER SIDE, in padded tokens "
                       "(rows x longest sentence): a batch closes when its source or its target "
                       "side would exceed it. One optimizer step reads up to processes x "
                       "--accum-steps x --max-tokens tokens per side (printed at start-up); the "
                       f"paper's step: {PAPER_TOKENS_PER_STEP}, e.g. 8 GPUs x 3125. "
                       f"Default: {PAPER_TOKENS_PER_STEP}, or from --tokens-per-step")
    train.add_argument("--tokens-per-step", type=int, default=None,
                       help="instead of --max-tokens: padded tokens per side in one optimizer "
                       "step, all processes together; --max-tokens becomes this divided by "
                       "processes x --accum-steps")
    train.add_argument("--accum-steps", type=int, default=1,
                       help="batches per process accumulated into one optimizer step")
    train.add_argument("--steps", type=int, default=100_000, help="optimizer steps in all")
    train.add_argument("--warmup", type=int, default=4000, help="warm-up steps of the schedule")
    train.add_argument("--lr-factor", type=float, default=1.0, help="factor of the schedule")
    train.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon_ls")
    train.add_argument("--clip-norm", type=float, default=None, help="clip the gradient norm")
    train.add_argument("--seed", type=int, default=0, help="seeds the model, data order, dropout")
    train.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    train.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                       help="auto: bf16 autocast on GPUs that support it, else fp32")
    train.add_argument("--deterministic", action="store_true",
                       help="deterministic kernels only (torch.use_deterministic_algorithms, "
                       "CUBLAS_WORKSPACE_CONFIG, cuDNN), as a resumed run on CUDA needs to "
                       "continue bit for bit; costs some speed (the CPU needs no flag)")
    run_ = p.add_argument_group("logging, evaluation, checkpoints")
    run_.add_argument("--out-dir", type=Path, default=Path("runs/aiayn"),
                      help="checkpoints, vocabulary and log.jsonl go here")
    run_.add_argument("--log-every", type=int, default=100, help="steps between log lines")
    run_.add_argument("--eval-every", type=int, default=1000, help="steps between evaluations")
    run_.add_argument("--eval-limit", type=int, default=1000,
                      help="evaluate on at most this many held-out pairs")
    run_.add_argument("--save-every", type=int, default=1000, help="steps between checkpoints")
    run_.add_argument("--keep-last", type=int, default=5, help="checkpoints to keep")
    run_.add_argument("--resume", action="store_true",
                      help="continue from the latest checkpoint in --out-dir")
    run_.add_argument("--no-progress", action="store_true", help="no progress bar")
    run_.add_argument("--simulate-crash-at", type=int, default=None, metavar="STEP",
                      help="for tests: kill the process (os._exit) right after step STEP")
    return p


def _check_args(args) -> None:
    positive = ("vocab_size", "max_len", "n_train", "n_valid", "max_tokens", "tokens_per_step",
                "accum_steps", "steps", "warmup", "log_every", "eval_every", "eval_limit",
                "save_every", "keep_last", "d_model", "n_heads", "n_layers", "d_ff",
                "vocab_timeout")
    for name in positive:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if (args.train_src is None) != (args.train_tgt is None):
        raise ValueError("--train-src and --train-tgt go together: give both or neither")
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise ValueError("--valid-src and --valid-tgt go together: give both or neither")
    if args.valid_src is not None and args.train_src is None:
        raise ValueError("--valid-src/--valid-tgt need --train-src/--train-tgt")
    if not 0.0 <= args.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    if args.max_tokens is not None and args.tokens_per_step is not None:
        raise ValueError("give --max-tokens (per process) or --tokens-per-step (in all), not both")


def _resolve_max_tokens(args, world_size: int) -> str:
    """Set ``args.max_tokens`` (from ``--tokens-per-step`` if given) and return the line
    that tells the user how many tokens one optimizer step reads."""
    share = world_size * args.accum_steps
    if args.tokens_per_step is not None:
        args.max_tokens = args.tokens_per_step // share
        if args.max_tokens < 1:
            raise ValueError(f"--tokens-per-step {args.tokens_per_step} is fewer than one token "
                             f"per batch of {world_size} process(es) x --accum-steps "
                             f"{args.accum_steps}")
    elif args.max_tokens is None:
        args.max_tokens = PAPER_TOKENS_PER_STEP
    total = share * args.max_tokens
    return (f"{world_size} process(es) x --accum-steps {args.accum_steps} x --max-tokens "
            f"{args.max_tokens} = up to {total:,} padded tokens per side in each optimizer step "
            f"(the paper: about {PAPER_TOKENS_PER_STEP:,})")


def main(argv: list[str] | None = None) -> dict:
    """Run ``python -m aiayn.train`` with the arguments ``argv`` (default ``sys.argv[1:]``).

    Returns a summary: ``step`` reached, ``tokens_per_s`` (source and target tokens,
    padding excluded, per second of training, all ranks together), the last
    ``train_loss``, the last evaluation, ``world_size``, ``precision`` and the path of the
    last ``checkpoint``. Bad input raises ``ValueError``, ``FileNotFoundError`` or
    ``TimeoutError`` with a message naming the argument or file; :func:`run` turns them
    into an exit message."""
    args = build_parser().parse_args(argv)
    _check_args(args)
    from .distributed import (
        cleanup_distributed,
        deterministic_algorithms,
        init_distributed,
        latest_checkpoint,
        process_layout,
    )

    rank, world_size, _ = process_layout()
    tokens_note = _resolve_max_tokens(args, world_size)
    with deterministic_algorithms(args.deterministic):  # before the first CUDA kernel
        args.out_dir.mkdir(parents=True, exist_ok=True)
        if not args.resume and latest_checkpoint(args.out_dir) is not None:
            raise ValueError(
                f"--out-dir {args.out_dir} already holds checkpoints: pass --resume to continue "
                "from the latest, or choose another --out-dir"
            )
        data = load_data(args, rank)  # first: it may wait for rank 0 longer than a collective may
        ctx = init_distributed(args.device)
        try:
            if ctx.is_main:  # stderr: stdout's last line is the summary
                print(f"python -m aiayn.train: {tokens_note}", file=sys.stderr, flush=True)
            return train_loop(args, ctx, *data)
        finally:
            cleanup_distributed(ctx)


def run(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m aiayn.train``: :func:`main`, with bad input reported as
    ``python -m aiayn.train: error: <message>`` and exit status 1, not a traceback."""
    try:
        summary = main(argv)
    except (ValueError, FileNotFoundError, ImportError, TimeoutError) as error:
        raise SystemExit(f"python -m aiayn.train: error: {error}") from None
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({k: v for k, v in summary.items() if k != "eval"} | summary["eval"]))
