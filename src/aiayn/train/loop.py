"""The training run behind ``python -m aiayn.train`` (:func:`aiayn.train.cli.main`
parses the arguments and calls it): data and vocabulary, the model's config, resuming from a
checkpoint, and the loop of optimizer steps with evaluation and checkpoints.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch

__all__ = ["load_data", "train_loop"]


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


def load_data(args, rank: int):
    """Tokenizer, training pairs (EncodedPairs), held-out text pairs, task name, data record.

    Runs before the process group exists: rank 0 learns a missing BPE vocabulary while the
    other ranks wait for its file (:func:`aiayn.train.subword.shared_vocabulary`), so that no
    collective call has to wait that long."""
    if args.train_src is None:  # the generated date task of chapter 7
        from ..learning.data import date_pairs, date_tokenizer
        from .batching import EncodedPairs

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
    from ..model import TransformerConfig

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


def train_loop(args, ctx, tokenizer, pairs, valid, task: str, data_info: dict) -> dict:
    """The training loop of :func:`aiayn.train.cli.main`, in the process group ``ctx``,
    on the data :func:`load_data` returned."""
    from ..learning.training import (
        label_smoothed_cross_entropy,
        noam_scheduler,
        paper_optimizer,
    )
    from ..model import Transformer
    from .batching import BatchStream
    from .distributed import latest_checkpoint, rng_states, save_rotating
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
