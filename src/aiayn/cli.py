"""``python -m aiayn.train``: the paper's training run, on one process or many.

One command for a laptop and for a machine with several GPUs::

    python -m aiayn.train --steps 2000                       # the generated date task
    torchrun --nproc_per_node=8 -m aiayn.train --model base \\
        --train-src train.en --train-tgt train.de \\
        --valid-src newstest2013.en --valid-tgt newstest2013.de --out-dir runs/base

What it does, step by step (:func:`main`): join the process group that ``torchrun``
describes (:func:`aiayn.distributed.init_distributed`); read the data (the generated
date task, or two aligned text files with a shared BPE vocabulary learned on them,
:mod:`aiayn.subword`); batch it by token count (:mod:`aiayn.batching`); train with the
paper's recipe (label smoothing, Adam 0.9/0.98/1e-9, the warm-up schedule of
:mod:`aiayn.train`) under ``DistributedDataParallel``, with gradient accumulation and
bf16 autocast where the GPU supports it; evaluate now and then; and write
checkpoints atomically, keeping the last few, from which ``--resume`` continues
bit for bit.

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
        "Several GPUs: torchrun --nproc_per_node=N -m aiayn.train ... "
        "After a crash, run the same command again with --resume.",
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
    model = p.add_argument_group("model (a preset, then overrides)")
    model.add_argument("--model", choices=sorted(PRESETS), default="tiny",
                       help="tiny: chapter 7's model; base, big: the paper's Table 3")
    for flag in ("--d-model", "--n-heads", "--n-layers", "--d-ff"):
        model.add_argument(flag, type=int, help="override the preset")
    model.add_argument("--dropout", type=float, help="override the preset's P_drop")
    train = p.add_argument_group("training")
    train.add_argument("--max-tokens", type=int, default=25_000,
                       help="padded source (and target) tokens per batch and process")
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
    positive = ("vocab_size", "max_len", "n_train", "n_valid", "max_tokens", "accum_steps",
                "steps", "warmup", "log_every", "eval_every", "eval_limit", "save_every",
                "keep_last", "d_model", "n_heads", "n_layers", "d_ff")
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


def _log(ctx, out_dir: Path, record: dict) -> None:
    if ctx.is_main:
        with open(out_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def _barrier(ctx) -> None:
    if ctx.distributed:
        import torch.distributed as dist

        dist.barrier()


def _load_data(args, ctx):
    """Tokenizer, training pairs (EncodedPairs), held-out text pairs, task name."""
    from .batching import EncodedPairs

    if args.train_src is None:  # the generated date task of chapter 7
        from .data import date_pairs, date_tokenizer

        tokenizer = date_tokenizer()
        train = date_pairs(args.n_train, "train", seed=args.seed)
        valid = date_pairs(args.n_valid, "test", seed=args.seed)
        src = [tokenizer.encode(s) for s, _ in train]
        tgt = [tokenizer.encode(t, bos=True) for _, t in train]
        return tokenizer, EncodedPairs(src, tgt), valid, "dates"

    from .subword import SubwordTokenizer, read_parallel, train_subword_tokenizer

    train = read_parallel(args.train_src, args.train_tgt, ("--train-src", "--train-tgt"))
    valid = []
    if args.valid_src is not None:
        valid = read_parallel(args.valid_src, args.valid_tgt, ("--valid-src", "--valid-tgt"))
    vocab_path = args.out_dir / "tokenizer.json"
    if ctx.is_main and not vocab_path.is_file():
        if args.resume and list((args.out_dir).glob("checkpoint_*.pt")):
            raise FileNotFoundError(f"--resume: the vocabulary {vocab_path} of the checkpoints is missing")
        tokenizer = train_subword_tokenizer([args.train_src, args.train_tgt], args.vocab_size)
        tmp = vocab_path.with_name(".tokenizer.json.tmp")
        tokenizer.save(tmp)
        os.replace(tmp, vocab_path)  # atomic, as the checkpoints
    _barrier(ctx)
    tokenizer = SubwordTokenizer.load(vocab_path)
    # Encode in chunks, each stored as int32 arrays at once: Python lists of the ids of
    # millions of sentences would take several GB per process.
    parts, dropped, chunk = [], 0, 100_000
    for start in range(0, len(train), chunk):
        block = train[start : start + chunk]
        src = tokenizer.encode_batch([s for s, _ in block])
        tgt = tokenizer.encode_batch([t for _, t in block], bos=True)
        kept = [i for i in range(len(src))
                if len(src[i]) <= args.max_len and len(tgt[i]) <= args.max_len]
        dropped += len(src) - len(kept)
        if kept:
            parts.append(EncodedPairs([src[i] for i in kept], [tgt[i] for i in kept]))
    if not parts:
        raise ValueError(f"--max-len {args.max_len}: every training pair is longer than that")
    if dropped:
        _log(ctx, args.out_dir, {"event": "dropped_long_pairs", "count": dropped,
                                 "max_len": args.max_len})
    pairs = EncodedPairs.concatenate(parts)
    return tokenizer, pairs, valid, "text"


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


def _check_resume_config(path: Path, state: dict, config, data: dict) -> None:
    saved = state["config"]
    ours = asdict(config)
    diff = [k for k in ours if saved.get(k) != ours[k]]
    if diff:
        details = ", ".join(
            f"{k}={saved.get(k)!r} (this run: {ours[k]!r}, {CONFIG_FLAGS.get(k, k)})" for k in diff
        )
        raise ValueError(f"--resume: checkpoint {path} was written by another config: {details}")
    for key in ("n_pairs", "max_tokens", "seed"):
        if state["data"][key] != data[key]:
            raise ValueError(
                f"--resume: checkpoint {path} was trained with {key}={state['data'][key]}, "
                f"this run has {data[key]} (same data, --max-tokens and --seed are needed)"
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


def _evaluate(model, tokenizer, valid, task: str, args, ctx, autocast) -> dict:
    """Held-out loss (teacher forcing) and exact match (dates) or BLEU (text), greedy."""
    from .data import pad_batch
    from .decode import greedy_decode
    from .train import teacher_forcing_step

    valid = valid[: args.eval_limit]
    if not valid:
        return {}
    model.eval()
    loss_sum, n_tokens, hypotheses = 0.0, 0, []
    size = 64
    with torch.no_grad():
        for i in range(0, len(valid), size):
            chunk = valid[i : i + size]
            src = pad_batch([tokenizer.encode(s) for s, _ in chunk], tokenizer.pad_id)
            tgt = pad_batch([tokenizer.encode(t, bos=True) for _, t in chunk], tokenizer.pad_id)
            cap = model.config.max_len
            src, tgt = src[:, :cap].to(ctx.device), tgt[:, :cap].to(ctx.device)
            with autocast():
                loss, _, n = teacher_forcing_step(model, src, tgt, 0.0, tokenizer.pad_id)
                out = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id,
                                    max_len=min(src.shape[1] + 50, cap - 1), use_cache=True)
            loss_sum, n_tokens = loss_sum + loss.item() * n, n_tokens + n
            hypotheses += [tokenizer.decode(row) for row in out.tokens.cpu()]
    model.train()
    references = [t for _, t in valid]
    result = {"valid_loss": loss_sum / n_tokens, "valid_pairs": len(valid)}
    if task == "dates":
        result["exact_match"] = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(valid)
    else:
        try:
            import sacrebleu
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("BLEU needs sacrebleu: pip install 'aiayn[scale]'") from error
        result["bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
    return result


def main(argv: list[str] | None = None) -> dict:
    """Run ``python -m aiayn.train`` with the arguments ``argv`` (default ``sys.argv[1:]``).

    Returns a summary: ``step`` reached, ``tokens_per_s`` (source and target tokens,
    padding excluded, per second of training, all ranks together), the last
    ``train_loss``, the last evaluation, ``world_size``, ``precision`` and the path of the
    last ``checkpoint``. Bad input raises ``ValueError`` or ``FileNotFoundError`` with a
    message naming the argument or file; :func:`run` turns them into an exit message."""
    args = build_parser().parse_args(argv)
    _check_args(args)
    from .batching import BatchStream
    from .distributed import (
        cleanup_distributed,
        init_distributed,
        latest_checkpoint,
        rng_states,
        save_rotating,
        set_rng_states,
    )
    from .model import Transformer
    from .train import label_smoothed_cross_entropy, noam_scheduler, paper_optimizer

    ctx = init_distributed(args.device)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        resume_from = latest_checkpoint(args.out_dir) if args.resume else None
        if not args.resume and latest_checkpoint(args.out_dir) is not None:
            raise ValueError(
                f"--out-dir {args.out_dir} already holds checkpoints: pass --resume to continue "
                "from the latest, or choose another --out-dir"
            )
        tokenizer, pairs, valid, task = _load_data(args, ctx)
        longest = int(max(pairs.src_lengths.max(), pairs.tgt_lengths.max()))
        config = _make_config(args, len(tokenizer), longest)
        stream = BatchStream(pairs, args.max_tokens, args.seed, tokenizer.pad_id)
        data_info = {"n_pairs": len(pairs), "max_tokens": args.max_tokens, "seed": args.seed}
        autocast, precision = _autocast(args, ctx)

        torch.manual_seed(args.seed)  # the same initial weights on every rank
        model = Transformer(config).to(ctx.device)
        optimizer = paper_optimizer(model)
        scheduler = noam_scheduler(optimizer, config.d_model, args.warmup, args.lr_factor)
        step, consumed = 0, 0
        if resume_from is not None:
            state = torch.load(resume_from, map_location=ctx.device, weights_only=False)
            _check_resume_config(resume_from, state, config, data_info)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            step, consumed = state["step"], state["data"]["consumed"]
            set_rng_states(state["rng"])
            _log(ctx, args.out_dir, {"event": "resume", "checkpoint": str(resume_from), "step": step})
        train_model = model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
            train_model = DistributedDataParallel(model, device_ids=ids)
        _log(ctx, args.out_dir, {"event": "start", "step": step, "world_size": ctx.world_size,
                                 "config": asdict(config), "precision": precision, "task": task,
                                 "pairs": len(pairs), "batches_per_epoch": stream.batches_per_epoch})

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
                _log(ctx, args.out_dir, {"event": "train", "step": step, "loss": summary["train_loss"],
                                         "lr": lr, "tokens_per_s": train_tokens / train_time})
                if bar is not None:
                    bar.set_postfix(loss=f"{summary['train_loss']:.3f}",
                                    tok_s=f"{train_tokens / train_time:,.0f}", lr=f"{lr:.2e}")
            if (step % args.eval_every == 0 or step == args.steps) and ctx.is_main:
                summary["eval"] = _evaluate(model, tokenizer, valid, task, args, ctx, autocast)
                _log(ctx, args.out_dir, {"event": "eval", "step": step, **summary["eval"]})
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
        _log(ctx, args.out_dir, {"event": "end", **summary})
        return summary
    finally:
        cleanup_distributed(ctx)


def _all_reduce(ctx, *values: float) -> list[float]:
    from .distributed import all_reduce_sum

    return all_reduce_sum(ctx, list(values))


def run(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m aiayn.train``: :func:`main`, with bad input reported as
    ``python -m aiayn.train: error: <message>`` and exit status 1, not a traceback."""
    try:
        summary = main(argv)
    except (ValueError, FileNotFoundError, ImportError) as error:
        raise SystemExit(f"python -m aiayn.train: error: {error}") from None
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({k: v for k, v in summary.items() if k != "eval"} | summary["eval"]))
