"""``python -m aiayn.train.translate``: translate with a run of ``python -m aiayn.train``.

One command turns a training run's folder into translations and a score::

    python -m aiayn.train.translate --run-dir runs/base --input newstest2014.en \\
        --output newstest2014.hyp.de --reference newstest2014.de

It loads the last ``--average`` checkpoints of ``--run-dir`` (5 by default) and averages
their weights, as the paper does for its base models (Section 6.1), together with the
run's vocabulary (``tokenizer.json``, or the characters of the date task); translates
every line of ``--input`` (default: standard input) by beam search as in Section 6.1
(beam 4, length penalty alpha = 0.6, at most input length + 50 tokens), with cached keys
and values, in batches of sources of equal length (so no source is padded and each gets
exactly its own length limit); writes one translation per line to ``--output`` (default:
standard output); and, given ``--reference``, prints on standard error the score that
``python -m aiayn.train`` reports while it trains: sacreBLEU, or the exact-match rate on
the date task.

sacreBLEU scores detokenized text with its own tokenization; the paper's BLEU is not that
score. The evaluation script that the authors published with their code
(``tensor2tensor/utils/get_ende_bleu.sh``) tokenizes with Moses, splits hyphenated
compounds (``rich-text`` becomes ``rich ##AT##-##AT## text``) and runs
``multi-bleu.perl``: run it on ``--output`` to compare with the paper's Table 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import torch

__all__ = [
    "load_run", "translate_lines", "score_translations", "evaluate", "build_parser", "main", "run",
]


def _run_tokenizer(run_dir: Path, state: dict):
    if state.get("vocab") == "date_tokenizer":
        from ..learning.data import date_tokenizer

        return date_tokenizer()
    from .subword import SubwordTokenizer

    return SubwordTokenizer.load(run_dir / state.get("vocab", "tokenizer.json"))


def load_run(run_dir: str | Path, average: int = 5, device: str | torch.device = "cpu"):
    """``(model, tokenizer, task, steps)`` of a ``python -m aiayn.train`` run folder.

    ``model`` has the element-wise mean of the weights of the last ``average`` checkpoints
    (fewer if the folder holds fewer; ``steps`` lists those averaged), in eval mode on
    ``device``; ``tokenizer`` is the run's vocabulary; ``task`` is ``"dates"`` or
    ``"text"``. Only the model weights are read from the checkpoint files (memory-mapped),
    not the optimizer's state. Checkpoints are trusted files: they are unpickled."""
    from ..learning.training import average_state_dicts
    from ..model import Transformer, TransformerConfig
    from .distributed import list_checkpoints

    run_dir = Path(run_dir)
    if not isinstance(average, int) or average < 1:
        raise ValueError(f"--average must be a positive int, got {average!r}")
    found = list_checkpoints(run_dir)[-average:]
    if not found:
        raise FileNotFoundError(f"--run-dir {run_dir}: no checkpoint_<step>.pt in it "
                                "(python -m aiayn.train --out-dir writes them)")
    states = [torch.load(p, map_location="cpu", weights_only=False, mmap=True) for _, p in found]
    if any(s["config"] != states[-1]["config"] for s in states):
        raise ValueError(f"--run-dir {run_dir}: the last {len(found)} checkpoints hold models "
                         "of different configs; average fewer (--average)")
    model = Transformer(TransformerConfig(**states[-1]["config"]))
    model.load_state_dict(average_state_dicts([s["model"] for s in states]))
    tokenizer = _run_tokenizer(run_dir, states[-1])
    return model.to(device).eval(), tokenizer, states[-1].get("task", "text"), [s for s, _ in found]


@torch.no_grad()
def translate_lines(model, tokenizer, lines: list[str], beam_size: int = 4, alpha: float = 0.6,
                    batch_size: int = 64, extra_len: int = 50) -> list[str]:
    """Translate each of ``lines``: beam search (:func:`aiayn.learning.decode.beam_search_batch`,
    cached) with at most ``len(source ids) + extra_len`` output tokens (Section 6.1), on
    batches of at most ``batch_size`` sources of equal length. Returns one string per
    line, in order, with no newline in it. Raises ``ValueError`` naming a line that the
    vocabulary cannot encode or that is longer than the model's ``max_len``."""
    from ..learning.decode import beam_search_batch

    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch-size must be a positive int, got {batch_size!r}")
    cap, device = model.config.max_len, next(model.parameters()).device
    ids = []
    for number, line in enumerate(lines, start=1):
        try:
            ids.append(tokenizer.encode(line))
        except ValueError as error:
            raise ValueError(f"input line {number}: {error}") from None
        if len(ids[-1]) > cap:
            raise ValueError(f"input line {number} has {len(ids[-1])} tokens; the model "
                             f"reads at most {cap} (its max_len)")
    by_length: dict[int, list[int]] = {}
    for i, seq in enumerate(ids):
        by_length.setdefault(len(seq), []).append(i)
    out = [""] * len(ids)
    for length, rows in sorted(by_length.items()):
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            src = torch.tensor([ids[i] for i in chunk], device=device)  # (B, S), no padding
            hyps = beam_search_batch(model, src, tokenizer.bos_id, tokenizer.eos_id, beam_size,
                                     min(length + extra_len, cap - 1), alpha, use_cache=True)
            for i, best in zip(chunk, hyps, strict=True):
                out[i] = " ".join(tokenizer.decode(best[0][0]).splitlines())
    return out


def score_translations(hypotheses: list[str], references: list[str], task: str,
                       signature: bool = False) -> dict:
    """``{"exact_match": rate}`` on the date task, ``{"bleu": score}`` (sacreBLEU's corpus
    BLEU, 0 to 100) on text: what ``python -m aiayn.train`` reports while it trains. With
    ``signature``, also ``bleu_signature``: sacreBLEU's description of how it scored."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} translations but {len(references)} references: "
                         "--reference must have one line per input line")
    if task == "dates":
        hits = sum(h == r for h, r in zip(hypotheses, references, strict=True))
        return {"exact_match": hits / max(len(references), 1)}
    try:
        import sacrebleu
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("BLEU needs sacrebleu: pip install 'aiayn[scale]'") from error
    bleu = sacrebleu.metrics.BLEU()
    result = {"bleu": bleu.corpus_score(hypotheses, [references]).score}
    return result | ({"bleu_signature": str(bleu.get_signature())} if signature else {})


@torch.no_grad()
def evaluate(model, tokenizer, pairs: list[tuple[str, str]], task: str, autocast=nullcontext,
             batch_size: int = 64) -> dict:
    """What ``python -m aiayn.train`` reports on held-out ``pairs`` (source, reference):
    ``valid_loss`` (teacher forcing, per target token), ``valid_pairs``, and the
    :func:`score_translations` of greedy, cached decoding (cheaper than beam search, so
    it can run often during training). ``autocast`` makes the precision context."""
    from ..learning.data import pad_batch
    from ..learning.decode import greedy_decode
    from ..learning.training import teacher_forcing_step

    if not pairs:
        return {}
    was_training, device = model.training, next(model.parameters()).device
    model.eval()
    loss_sum, n_tokens, hypotheses, cap = 0.0, 0, [], model.config.max_len
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i : i + batch_size]
        src = pad_batch([tokenizer.encode(s) for s, _ in chunk], tokenizer.pad_id)
        tgt = pad_batch([tokenizer.encode(t, bos=True) for _, t in chunk], tokenizer.pad_id)
        src, tgt = src[:, :cap].to(device), tgt[:, :cap].to(device)
        with autocast():
            loss, _, n = teacher_forcing_step(model, src, tgt, 0.0, tokenizer.pad_id)
            out = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id,
                                max_len=min(src.shape[1] + 50, cap - 1), use_cache=True)
        loss_sum, n_tokens = loss_sum + loss.item() * n, n_tokens + n
        hypotheses += [tokenizer.decode(row) for row in out.tokens.cpu()]
    model.train(was_training)
    scores = score_translations(hypotheses, [t for _, t in pairs], task)
    return {"valid_loss": loss_sum / n_tokens, "valid_pairs": len(pairs), **scores}


def build_parser() -> argparse.ArgumentParser:
    """The ``argparse.ArgumentParser`` of ``python -m aiayn.train.translate`` (see ``--help``)."""
    p = argparse.ArgumentParser(
        prog="python -m aiayn.train.translate",
        description="Translate with a model trained by python -m aiayn.train: average its last "
        "checkpoints, beam-search every input line, optionally score against references.",
        epilog="The score is sacreBLEU's (detokenized) or, for the date task, exact match. The "
        "paper's BLEU is tokenized (Moses) with compounds split: not directly comparable.",
    )
    p.add_argument("--run-dir", type=Path, required=True,
                   help="the --out-dir of python -m aiayn.train: checkpoints and vocabulary")
    p.add_argument("--average", type=int, default=5,
                   help="average the weights of this many last checkpoints (default and "
                   "Section 6.1: 5)")
    p.add_argument("--input", type=Path, default=None,
                   help="source sentences, one per line (default: standard input)")
    p.add_argument("--output", type=Path, default=None,
                   help="write one translation per line here (default: standard output)")
    p.add_argument("--reference", type=Path, default=None,
                   help="reference translations, aligned with --input: report the score")
    p.add_argument("--beam", type=int, default=4, help="beam size (default and Section 6.1: 4)")
    p.add_argument("--alpha", type=float, default=0.6,
                   help="length penalty alpha (default and Section 6.1: 0.6)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="at most this many sources decoded together (default: 64)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto (the default): CUDA when available, else the CPU")
    return p


def _read(path: Path | None, argument: str) -> list[str]:
    if path is None:
        return sys.stdin.read().splitlines()
    if not path.is_file():
        raise FileNotFoundError(f"{argument}: no such file: {path}")
    return path.read_text(encoding="utf-8").splitlines()


def main(argv: list[str] | None = None) -> dict:
    """Run ``python -m aiayn.train.translate`` with ``argv``; write the translations and return a
    summary: ``sentences``, ``checkpoints`` (the steps averaged), ``task``, and with
    ``--reference`` the score (``bleu`` and its sacreBLEU ``bleu_signature``, or
    ``exact_match``)."""
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer, task, steps = load_run(args.run_dir, args.average, device)
    lines = _read(args.input, "--input")
    references = _read(args.reference, "--reference") if args.reference is not None else None
    if references is not None and len(references) != len(lines):
        raise ValueError(f"--reference has {len(references)} lines but the input has {len(lines)}")
    hypotheses = translate_lines(model, tokenizer, lines, args.beam, args.alpha, args.batch_size)
    text = "".join(h + "\n" for h in hypotheses)
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        args.output.write_text(text, encoding="utf-8")
    summary = {"sentences": len(lines), "checkpoints": steps, "task": task}
    if references is not None:
        summary.update(score_translations(hypotheses, references, task, signature=True))
    return summary


def run(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m aiayn.train.translate``: :func:`main`, with the summary as one
    JSON line on standard error, and bad input reported as
    ``python -m aiayn.train.translate: error: <message>`` (exit status 1), not a traceback."""
    try:
        summary = main(argv)
    except (ValueError, FileNotFoundError, ImportError) as error:
        raise SystemExit(f"python -m aiayn.train.translate: error: {error}") from None
    print(json.dumps(summary), file=sys.stderr)


if __name__ == "__main__":
    run()
