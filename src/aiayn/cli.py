"""``python -m aiayn.train``: the paper's training run, on one process or many.

One command for a laptop and for a machine with several GPUs::

    python -m aiayn.train --steps 2000 --max-tokens 4000     # the generated date task
    torchrun --nproc_per_node=8 -m aiayn.train --model base --max-tokens 3125 \\
        --train-src train.en --train-tgt train.de \\
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
two aligned text files with a shared BPE vocabulary, :mod:`aiayn.subword`, learned by
rank 0 *before* the process group exists while the other ranks wait for its file);
join the process group that ``torchrun`` describes
(:func:`aiayn.distributed.init_distributed`); batch by token count
(:mod:`aiayn.batching`); train with the paper's recipe (label smoothing, Adam
0.9/0.98/1e-9, the warm-up schedule of :mod:`aiayn.train`) under
``DistributedDataParallel``, with gradient accumulation and bf16 autocast where the GPU
supports it; evaluate now and then; and write checkpoints atomically, keeping the last
few. ``--resume`` continues from the latest, refusing a checkpoint of another config or
other data (it stores SHA-256 fingerprints of the training files and of the encoded
pairs); the run continues bit for bit on the CPU, and on CUDA it needs ``--deterministic``.
``python -m aiayn.translate`` (:mod:`aiayn.translate`) then uses the result.

The loss of one optimizer step is the label-smoothed cross-entropy summed over every
target token of every micro-batch on every rank, divided by their total number: so
``N`` ranks with ``accum_steps = a`` compute exactly the step that one process computes
on the ``N * a`` batches together. Dropout is seeded from the global batch number, so
even the dropout masks do not depend on how the batches are spread over processes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch

__all__ = ["build_parser", "main", "run"]

#: The command-line flag of each :class:`~aiayn.model.TransformerConfig` field, for messages.
CONFIG_FLAGS = {
    "d_model": "--d-model", "n_heads": "--n-heads", "n_layers": "--n-layers", "d_ff": "--d-ff",
    "dropout": "--dropout", "src_vocab": "the vocabulary size", "tgt_vocab": "the vocabulary size",
    "max_len": "--max-len",
}
PRESETS = {
    # Chapter 7's model: small enough for a CPU.
    "tiny": dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, dropout=0.1),
    # Table 3 of the paper.
    "base": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1),
    "big": dict(d_model=1024, n_heads=16, n_layers=6, d_ff=4096, dropout=0.3),
}
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
        "with --resume. Use the result with python -m aiayn.translate.",
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
                       help="tiny: chapter 7's model; base, big: the paper's Table 3")
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


def _log(is_main: bool, out_dir: Path, record: dict) -> None:
    if is_main:
        with open(out_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


#: What each entry of a checkpoint's "data" record means, for the --resume message.
DATA_FLAGS = {
    "n_pairs": "the number of training pairs", "max_tokens": "--max-tokens", "seed": "--seed",
    "train_src_sha256": "--train-src, the file's bytes",
    "train_tgt_sha256": "--train-tgt, the file's bytes",
    "pairs_sha256": "the encoded training pairs: the data, the vocabulary or --max-len",
}


def _data_info(args, pairs) -> dict:
    """What a checkpoint records of its data: sizes, settings, SHA-256 fingerprints."""
    from .distributed import file_sha256

    files = {f"train_{side}_sha256": file_sha256(path) if path is not None else None
             for side, path in (("src", args.train_src), ("tgt", args.train_tgt))}
    return {"n_pairs": len(pairs), "max_tokens": args.max_tokens, "seed": args.seed,
            "pairs_sha256": pairs.fingerprint(), **files}


def _load_data(args, rank: int):
    """Tokenizer, training pairs (EncodedPairs), held-out text pairs, task name, data record.

    Runs before the process group exists: rank 0 learns a missing BPE vocabulary while the
    other ranks wait for its file (:func:`aiayn.subword.shared_vocabulary`), so that no
    collective call has to wait that long."""
    if args.train_src is None:  # the generated date task of chapter 7
        from .batching import EncodedPairs
        from .data import date_pairs, date_tokenizer

        tokenizer = date_tokenizer()
        train = date_pairs(args.n_train, "train", seed=args.seed)
        valid = date_pairs(args.n_valid, "test", seed=args.seed)
        pairs = EncodedPairs([tokenizer.encode(s) for s, _ in train],
                             [tokenizer.encode(t, bos=True) for _, t in train])
        return tokenizer, pairs, valid, "dates", _data_info(args, pairs)

    from .batching import encode_pairs
    from .distributed import latest_checkpoint
    from .subword import read_parallel, shared_vocabulary

    train = read_parallel(args.train_src, args.train_tgt, ("--train-src", "--train-tgt"))
    valid = []
    if args.valid_src is not None:
        valid = read_parallel(args.valid_src, args.valid_tgt, ("--valid-src", "--valid-tgt"))
    vocab_path = args.out_dir / "tokenizer.json"
    if args.resume and not vocab_path.is_file() and latest_checkpoint(args.out_dir) is not None:
        raise FileNotFoundError(f"--resume: the vocabulary {vocab_path} of the checkpoints "
                                "is missing")
    tokenizer = shared_vocabulary(vocab_path, [args.train_src, args.train_tgt], args.vocab_size,
                                  rank, args.vocab_timeout)
    pairs, dropped = encode_pairs(tokenizer, train, args.max_len)
    if dropped:
        _log(rank == 0, args.out_dir, {"event": "dropped_long_pairs", "count": dropped,
                                       "max_len": args.max_len})
    return tokenizer, pairs, valid, "text", _data_info(args, pairs)


def _make_config(args, vocab: int, longest: int):
    from .model import TransformerConfig

    sizes = dict(PRESETS[args.model])
    for name in ("d_model", "n_heads", "n_layers", "d_ff", "dropout"):
        if getattr(args, name) is not None:
            sizes[name] = getattr(args, name)
    if sizes["d_model"] % sizes["n_heads"]:
        raise ValueError(
            f"--d-model ({sizes['d_model']}) must be divisible by --n-heads ({sizes['n_heads']}) "
            f"(model preset {args.model!r} plus overrides)"
        )
    # Room for the longest training sentence and for generating 50 tokens past a source
    # (Section 6.1: "maximum output length to input length + 50").
    max_len = max(args.max_len, longest) + 64
    return TransformerConfig(src_vocab=vocab, tgt_vocab=vocab, max_len=max_len, **sizes)


def _short(value) -> str:
    return f"{value[:12]}..." if isinstance(value, str) and len(value) == 64 else str(value)


def _check_resume_config(path: Path, state: dict, config, data: dict) -> None:
    saved = state["config"]
    ours = asdict(config)
    diff = [k for k in ours if saved.get(k) != ours[k]]
    if diff:
        details = ", ".join(
            f"{k}={saved.get(k)!r} (this run: {ours[k]!r}, {CONFIG_FLAGS.get(k, k)})" for k in diff
        )
        raise ValueError(f"--resume: checkpoint {path} was written by another config: {details}")
    # Checkpoints of older versions lack the fingerprints: what they have is compared.
    differ = [k for k in DATA_FLAGS if k in state["data"] and state["data"][k] != data[k]]
    if differ:
        details = "; ".join(f"{k}={_short(state['data'][k])}, this run has {_short(data[k])} "
                            f"({DATA_FLAGS[k]})" for k in differ)
        raise ValueError(
            f"--resume: checkpoint {path} was trained on other data or settings: {details}. "
            "Resume with the same training files, vocabulary, --max-len, --max-tokens and "
            "--seed, or train into a new --out-dir"
        )


def _dropout_seed(seed: int, g: int) -> int:
    """One seed per global batch: dropout masks independent of the process layout."""
    return (seed * 1_000_003 + g) % (2**63 - 1)


def _autocast(args, ctx):
    use_bf16 = args.precision == "bf16" or (
        args.precision == "auto" and ctx.device.type == "cuda" and torch.cuda.is_bf16_supported()
    )
    if use_bf16 and ctx.device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError("--precision bf16: this GPU does not support bfloat16")
    if not use_bf16:
        return nullcontext, "fp32"
    return (lambda: torch.autocast(ctx.device.type, dtype=torch.bfloat16)), "bf16"


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
        data = _load_data(args, rank)  # first: it may wait for rank 0 longer than a collective may
        ctx = init_distributed(args.device)
        try:
            if ctx.is_main:  # stderr: stdout's last line is the summary
                print(f"python -m aiayn.train: {tokens_note}", file=sys.stderr, flush=True)
            return _train(args, ctx, *data)
        finally:
            cleanup_distributed(ctx)


def _restore(args, ctx, path: Path, model, optimizer, scheduler, config,
             data_info: dict) -> tuple[int, int]:
    """Load checkpoint ``path`` into the model, optimizer, schedule and random generators;
    return ``(step, consumed)``."""
    from .distributed import set_rng_states

    state = torch.load(path, map_location=ctx.device, weights_only=False)
    _check_resume_config(path, state, config, data_info)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_states(state["rng"])
    _log(ctx.is_main, args.out_dir,
         {"event": "resume", "checkpoint": str(path), "step": state["step"]})
    return state["step"], state["data"]["consumed"]


def _train(args, ctx, tokenizer, pairs, valid, task: str, data_info: dict) -> dict:
    """The training loop of :func:`main`, in the process group ``ctx``."""
    from .batching import BatchStream
    from .distributed import latest_checkpoint, rng_states, save_rotating
    from .model import Transformer
    from .train import label_smoothed_cross_entropy, noam_scheduler, paper_optimizer
    from .translate import evaluate

    longest = int(max(pairs.src_lengths.max(), pairs.tgt_lengths.max()))
    config = _make_config(args, len(tokenizer), longest)
    stream = BatchStream(pairs, args.max_tokens, args.seed, tokenizer.pad_id)
    autocast, precision = _autocast(args, ctx)

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = Transformer(config).to(ctx.device)
    optimizer = paper_optimizer(model)
    scheduler = noam_scheduler(optimizer, config.d_model, args.warmup, args.lr_factor)
    step, consumed = 0, 0
    resume_from = latest_checkpoint(args.out_dir) if args.resume else None
    if resume_from is not None:
        step, consumed = _restore(args, ctx, resume_from, model, optimizer, scheduler, config,
                                  data_info)
    train_model = model
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        train_model = DistributedDataParallel(model, device_ids=ids)
    _log(ctx.is_main, args.out_dir, {
        "event": "start", "step": step, "world_size": ctx.world_size, "config": asdict(config),
        "precision": precision, "task": task, "pairs": len(pairs),
        "batches_per_epoch": stream.batches_per_epoch, "max_tokens": args.max_tokens,
        "tokens_per_step": ctx.world_size * args.accum_steps * args.max_tokens,
        "deterministic": torch.are_deterministic_algorithms_enabled()})

    bar = None
    if ctx.is_main and not args.no_progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=args.steps, initial=step, desc="training", leave=False)
    pad, eps = tokenizer.pad_id, args.label_smoothing
    train_time, train_tokens = 0.0, 0
    window = [0.0, 0.0]  # loss sum and target tokens since the last log line
    summary = {"step": step, "world_size": ctx.world_size, "precision": precision,
               "train_loss": None, "eval": {}, "checkpoint": None}
    model.train()
    while step < args.steps:
        t0 = time.perf_counter()
        gs = [stream.index(consumed, m, ctx.rank, ctx.world_size) for m in range(args.accum_steps)]
        batches = [stream.batch(g) for g in gs]
        n_tgt = sum(int((tgt[:, 1:] != pad).sum()) for _, tgt in batches)
        n_src = sum(int((src != pad).sum()) for src, _ in batches)
        total_tgt, total_src = _all_reduce(ctx, n_tgt, n_src)
        local_loss = 0.0
        for m, (g, (src, tgt)) in enumerate(zip(gs, batches, strict=True)):
            torch.manual_seed(_dropout_seed(args.seed, g))
            src, tgt = src.to(ctx.device), tgt.to(ctx.device)
            last = m == args.accum_steps - 1
            sync = nullcontext() if last or not ctx.distributed else train_model.no_sync()
            with sync:
                with autocast():
                    logits = train_model(src, tgt[:, :-1])  # (B, T, V)
                expected = tgt[:, 1:]
                n = int((expected != pad).sum())
                mean = label_smoothed_cross_entropy(logits.float(), expected, eps, ignore_index=pad)
                # Sum over this batch's tokens / all tokens of the step; DDP averages
                # over ranks, so multiply by world_size to get a plain sum.
                loss = mean * (n * ctx.world_size / total_tgt)
                loss.backward()
            local_loss += mean.item() * n
        if not math.isfinite(local_loss):
            raise FloatingPointError(f"the loss became {local_loss} at step {step}")
        if args.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step, consumed = step + 1, consumed + ctx.world_size * args.accum_steps
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        train_time += time.perf_counter() - t0
        train_tokens += int(total_tgt + total_src)
        window[0] += local_loss
        window[1] += n_tgt
        if bar is not None:
            bar.update(1)
            bar.set_postfix(tok_s=f"{train_tokens / train_time:,.0f}", lr=f"{lr:.2e}",
                            refresh=False)
        if step % args.log_every == 0 or step == args.steps:
            loss_sum, tokens = _all_reduce(ctx, *window)
            summary["train_loss"] = loss_sum / tokens
            window = [0.0, 0.0]
            _log(ctx.is_main, args.out_dir, {"event": "train", "step": step, "lr": lr,
                                             "loss": summary["train_loss"],
                                             "tokens_per_s": train_tokens / train_time})
            if bar is not None:
                bar.set_postfix(loss=f"{summary['train_loss']:.3f}",
                                tok_s=f"{train_tokens / train_time:,.0f}", lr=f"{lr:.2e}")
        if (step % args.eval_every == 0 or step == args.steps) and ctx.is_main:
            summary["eval"] = evaluate(model, tokenizer, valid[: args.eval_limit], task, autocast)
            _log(ctx.is_main, args.out_dir, {"event": "eval", "step": step, **summary["eval"]})
        if (step % args.save_every == 0 or step == args.steps) and ctx.is_main:
            state = {
                "config": asdict(config), "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "step": step, "data": {**data_info, "consumed": consumed}, "rng": rng_states(),
                "task": task, "vocab": "tokenizer.json" if task == "text" else "date_tokenizer",
                "args": {k: str(v) for k, v in vars(args).items()},
            }
            summary["checkpoint"] = str(save_rotating(state, args.out_dir, step, args.keep_last))
        if args.simulate_crash_at is not None and step == args.simulate_crash_at:
            sys.stdout.flush()
            os._exit(17)  # no cleanup, no final checkpoint: like a killed process
    if bar is not None:
        bar.close()
    summary.update(step=step, tokens_per_s=train_tokens / train_time if train_time else None)
    _log(ctx.is_main, args.out_dir, {"event": "end", **summary})
    return summary


def _all_reduce(ctx, *values: float) -> list[float]:
    from .distributed import all_reduce_sum

    return all_reduce_sum(ctx, list(values))


def run(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m aiayn.train``: :func:`main`, with bad input reported as
    ``python -m aiayn.train: error: <message>`` and exit status 1, not a traceback."""
    try:
        summary = main(argv)
    except (ValueError, FileNotFoundError, ImportError, TimeoutError) as error:
        raise SystemExit(f"python -m aiayn.train: error: {error}") from None
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({k: v for k, v in summary.items() if k != "eval"} | summary["eval"]))
