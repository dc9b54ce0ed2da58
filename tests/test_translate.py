"""``python -m aiayn.train.translate`` on runs of ``python -m aiayn.train``: averaged checkpoints,
batched cached beam search, one line out per line in, and the training run's scores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.learning.data import date_pairs, date_tokenizer
from aiayn.learning.decode import beam_search
from aiayn.model import Transformer, TransformerConfig
from aiayn.train.cli import main as train
from aiayn.train.translate import load_run, main, run, score_translations, translate_lines

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# A tiny model, a few steps: enough to emit some characters, not to be right.
TINY = ["--n-train", "2000", "--n-valid", "8", "--eval-limit", "4", "--max-tokens", "500",
        "--warmup", "20", "--lr-factor", "0.5", "--d-model", "32", "--d-ff", "64",
        "--n-layers", "1", "--log-every", "10", "--eval-every", "1000", "--no-progress"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A date-task run of 12 steps with a checkpoint every 3 (the last 3 kept)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # on a busy 2-core machine, threads wait for each other
    out = tmp_path_factory.mktemp("run")
    train([*TINY, "--steps", "12", "--save-every", "3", "--keep-last", "3", "--out-dir", str(out)])
    yield out
    torch.set_num_threads(saved)


def _inputs(tmp_path: Path, n: int = 8) -> tuple[list[str], list[str], Path, Path]:
    pairs = date_pairs(n, "test", seed=5)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    src_file, ref_file = tmp_path / "in.txt", tmp_path / "ref.txt"
    src_file.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    ref_file.write_text("".join(r + "\n" for r in references), encoding="utf-8")
    return sources, references, src_file, ref_file


def _averaged_by_hand(run_dir: Path, steps: list[int]) -> Transformer:
    states = [torch.load(run_dir / f"checkpoint_{s:08d}.pt", weights_only=False) for s in steps]
    model = Transformer(TransformerConfig(**states[-1]["config"]))
    model.load_state_dict({k: torch.stack([s["model"][k] for s in states]).mean(0)
                           if v.is_floating_point() else v for k, v in states[-1]["model"].items()})
    return model.eval()


def test_translations_and_score_match_decoding_the_averaged_model_directly(run_dir, tmp_path):
    sources, references, src_file, ref_file = _inputs(tmp_path)
    out_file = tmp_path / "out.txt"
    summary = main(["--run-dir", str(run_dir), "--input", str(src_file), "--output", str(out_file),
                    "--reference", str(ref_file), "--average", "3", "--batch-size", "3"])
    lines = out_file.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == len(sources)  # one line per input
    assert summary["checkpoints"] == [6, 9, 12] and summary["task"] == "dates"
    # The same model averaged by hand, each source decoded alone by the uncached beam search
    # with the paper's settings (beam 4, alpha 0.6, input length + 50).
    model, tok = _averaged_by_hand(run_dir, [6, 9, 12]), date_tokenizer()
    direct = []
    for text in sources:
        src = torch.tensor([tok.encode(text)])
        best = beam_search(model, src, tok.bos_id, tok.eos_id, 4, src.shape[1] + 50, 0.6)[0][0]
        direct.append(tok.decode(best))
    assert lines[:-1] == direct
    assert any(direct)  # the model says something, so the comparison bites
    assert summary["exact_match"] == score_translations(direct, references, "dates")["exact_match"]
    # The score is that of the references: a reference file that agrees on half the lines.
    half = [d if i % 2 else r for i, (d, r) in enumerate(zip(direct, references, strict=True))]
    ref_file.write_text("".join(r + "\n" for r in half), encoding="utf-8")
    again = main(["--run-dir", str(run_dir), "--input", str(src_file), "--output", str(out_file),
                  "--reference", str(ref_file), "--average", "3"])
    assert again["exact_match"] == score_translations(direct, half, "dates")["exact_match"] >= 0.5


def test_command_reads_stdin_writes_stdout_and_reports_on_stderr(run_dir, tmp_path):
    sources, _, _, _ = _inputs(tmp_path, n=5)
    result = subprocess.run(
        [sys.executable, "-m", "aiayn.train.translate", "--run-dir", str(run_dir), "--average", "2"],
        input="".join(s + "\n" for s in sources), env=ENV, capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    model, tok, task, steps = load_run(run_dir, average=2)
    assert (task, steps) == ("dates", [9, 12])
    assert result.stdout.split("\n")[:-1] == translate_lines(model, tok, sources)
    assert json.loads(result.stderr.strip().splitlines()[-1]) == {
        "sentences": 5, "checkpoints": [9, 12], "task": "dates"}


def test_bad_input_is_refused_with_a_clear_message(run_dir, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("Nov 29, 2026\nno such date #\n", encoding="utf-8")
    with pytest.raises(ValueError, match="input line 2: character '#'"):
        main(["--run-dir", str(run_dir), "--input", str(bad), "--output", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--reference has 1 lines but the input has 2"):
        (tmp_path / "ref.txt").write_text("2026-11-29\n", encoding="utf-8")
        main(["--run-dir", str(run_dir), "--input", str(bad),
              "--reference", str(tmp_path / "ref.txt")])
    with pytest.raises(FileNotFoundError, match="no checkpoint_<step>.pt in it"):
        main(["--run-dir", str(tmp_path), "--input", str(bad)])
    with pytest.raises(ValueError, match="--average must be a positive int"):
        load_run(run_dir, average=0)
    # The command's entry point: a one-line message and exit status 1, not a traceback.
    with pytest.raises(SystemExit, match="^python -m aiayn.train.translate: error: --run-dir .*: no "):
        run(["--run-dir", str(tmp_path)])


def test_text_run_is_scored_with_sacrebleu(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("sacrebleu")
    pairs = date_pairs(120, seed=2)
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("".join(f"{s} ok\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(f"{t} gut\n" for _, t in pairs), encoding="utf-8")
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(["--train-src", str(src), "--train-tgt", str(tgt), "--vocab-size", "300",
               "--max-tokens", "800", "--warmup", "10", "--d-model", "32", "--d-ff", "64",
               "--n-layers", "1", "--max-len", "40", "--steps", "2", "--no-progress",
               "--out-dir", str(tmp_path / "run")])
        out = tmp_path / "hyp.txt"
        summary = main(["--run-dir", str(tmp_path / "run"), "--input", str(src), "--output",
                        str(out), "--reference", str(tgt), "--beam", "2"])
    finally:
        torch.set_num_threads(saved)
    assert summary["task"] == "text" and summary["sentences"] == 120
    assert len(out.read_text(encoding="utf-8").split("\n")) == 121
    assert 0.0 <= summary["bleu"] <= 100.0 and "tok:13a" in summary["bleu_signature"]
