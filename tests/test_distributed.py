"""``python -m aiayn.train`` under ``torchrun``: data-parallel parity, resume, checkpoints.

The training runs are real subprocesses (``torchrun`` with gloo on the CPU), each a few
steps of chapter 7's small model on the generated date task, with one thread per
process so that runs compare bit for bit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import PARITY_MAX

from aiayn.train import distributed
from aiayn.train.cli import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
# A few steps, small batches; dropout stays on (0.1): it is seeded per global batch, so
# the layouts compared below draw the same masks, and the parity check still bites.
COMMON = ["--n-train", "2000", "--n-valid", "16", "--eval-limit", "8", "--max-tokens", "500",
          "--warmup", "10", "--log-every", "1", "--eval-every", "1000", "--no-progress"]
# float32: the same sums in a different order (all-reduce vs accumulation) round differently.
PARITY_RTOL, PARITY_ATOL = 1e-5, 1e-6


@pytest.fixture
def one_thread():
    """In-process runs on one thread, like the subprocesses: on a busy 2-core machine,
    several threads per process wait for each other far longer than they compute."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _train(out_dir: Path, *args: str, nproc: int = 1, check: bool = True):
    if nproc == 1:
        command = [sys.executable, "-m", "aiayn.train"]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={nproc}", "-m", "aiayn.train"]
    result = subprocess.run(
        [*command, *COMMON, "--out-dir", str(out_dir), *args],
        env=ENV, capture_output=True, text=True, timeout=300,
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _log(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "log.jsonl").read_text().splitlines()]


def test_two_gloo_processes_equal_one_process_on_the_combined_batch(tmp_path):
    steps = ["--steps", "4", "--save-every", "4"]
    _train(tmp_path / "ddp", *steps, nproc=2)
    _train(tmp_path / "one", *steps, "--accum-steps", "2")  # the same 2 batches per step
    _train(tmp_path / "half", *steps)  # one batch per step: different data
    ddp = _weights(tmp_path / "ddp" / "checkpoint_00000004.pt")
    one = _weights(tmp_path / "one" / "checkpoint_00000004.pt")
    half = _weights(tmp_path / "half" / "checkpoint_00000004.pt")
    assert _log(tmp_path / "ddp")[0]["world_size"] == 2
    assert ddp["data"]["consumed"] == one["data"]["consumed"] == 8
    worst = 0.0
    for name, p in one["model"].items():
        torch.testing.assert_close(ddp["model"][name], p, rtol=PARITY_RTOL, atol=PARITY_ATOL)
        worst = max(worst, (ddp["model"][name] - p).abs().max().item())
    # The check can fail: with half the data per step the weights end far apart.
    key = "float32 (2 gloo processes vs 1)"  # shown in the run's parity summary
    PARITY_MAX[key] = max(PARITY_MAX.get(key, 0.0), worst)
    far = max((half["model"][n] - p).abs().max().item() for n, p in one["model"].items())
    assert far > 100 * PARITY_ATOL > worst
    # Same loss history too (the log's loss is summed over ranks).
    loss_ddp = [r["loss"] for r in _log(tmp_path / "ddp") if r["event"] == "train"]
    loss_one = [r["loss"] for r in _log(tmp_path / "one") if r["event"] == "train"]
    assert loss_ddp == pytest.approx(loss_one, rel=1e-5)


def test_killed_run_resumes_bit_identically(tmp_path):
    steps = ["--steps", "6", "--save-every", "2", "--keep-last", "2"]
    _train(tmp_path / "straight", *steps)
    crashed = _train(tmp_path / "crash", *steps, "--simulate-crash-at", "5", check=False)
    assert crashed.returncode == 17  # os._exit: no cleanup, no final checkpoint
    saved = [step for step, _ in distributed.list_checkpoints(tmp_path / "crash")]
    assert saved == [2, 4]  # step 5 was lost with the process
    _train(tmp_path / "crash", *steps, "--resume")
    resumed = [r for r in _log(tmp_path / "crash") if r["event"] == "resume"]
    assert len(resumed) == 1 and resumed[0]["step"] == 4
    a = _weights(tmp_path / "straight" / "checkpoint_00000006.pt")
    b = _weights(tmp_path / "crash" / "checkpoint_00000006.pt")
    assert a["data"] == b["data"] and a["step"] == b["step"] == 6
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"])
        assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == 6
    # The training losses after the restart are the uninterrupted run's, exactly.
    losses = {r["step"]: r["loss"] for r in _log(tmp_path / "straight") if r["event"] == "train"}
    after = {r["step"]: r["loss"] for r in _log(tmp_path / "crash")[-5:] if r["event"] == "train"}
    assert after == {5: losses[5], 6: losses[6]}


def test_resume_refuses_a_checkpoint_of_another_config(tmp_path, one_thread):
    args = [*COMMON, "--out-dir", str(tmp_path), "--steps", "1", "--n-train", "200"]
    main(args)
    with pytest.raises(ValueError, match=r"another config: d_model=64 \(this run: 32, --d-model\)"):
        main([*args, "--resume", "--d-model", "32"])
    with pytest.raises(ValueError, match="already holds checkpoints: pass --resume"):
        main(args)
    with pytest.raises(ValueError, match=r"max_tokens=500, this run has 400"):
        main([*args, "--resume", "--max-tokens", "400"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--d-model", "30", "--n-heads", "4"], r"--d-model \(30\) must be divisible by --n-heads \(4\)"),
        (["--max-tokens", "10"], r"max_tokens \(10\) is smaller than the longest sentence"),
        (["--accum-steps", "0"], "--accum-steps must be positive"),
        (["--train-src", "x.txt"], "--train-src and --train-tgt go together"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_message(tmp_path, extra, message, one_thread):
    with pytest.raises(ValueError, match=message):
        main([*COMMON, "--out-dir", str(tmp_path), "--steps", "1", "--n-train", "50", *extra])


def test_command_line_reports_errors_without_a_traceback(tmp_path):
    result = _train(tmp_path, "--train-src", str(tmp_path / "no.en"),
                    "--train-tgt", str(tmp_path / "no.de"), check=False)
    assert result.returncode == 1
    assert "error: --train-src: no such file" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_options():
    result = subprocess.run([sys.executable, "-m", "aiayn.train", "--help"], env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    for flag in ("--max-tokens", "--accum-steps", "--resume", "--keep-last", "--save-every",
                 "--precision", "--train-src", "--valid-tgt", "torchrun", "--tokens-per-step",
                 "--deterministic", "--vocab-timeout", "python -m aiayn.train.translate"):
        assert flag in result.stdout
    # What --max-tokens counts cannot be misread: per process, per side, padded, either side.
    text = " ".join(result.stdout.split())
    for words in ("PER PROCESS AND PER SIDE", "padded tokens", "source or its target side",
                  "processes x --accum-steps x --max-tokens", "8 GPUs x 3125"):
        assert words in text, words


def test_start_up_line_says_the_tokens_of_one_optimizer_step(tmp_path, one_thread, capsys):
    args = [*COMMON, "--steps", "1", "--n-train", "200", "--accum-steps", "2"]
    main([*args, "--out-dir", str(tmp_path / "a")])
    assert ("1 process(es) x --accum-steps 2 x --max-tokens 500 = up to 1,000 padded tokens "
            "per side in each optimizer step") in capsys.readouterr().err
    # --tokens-per-step: the total, divided by processes x accum-steps for the user.
    summary = main([*[a for a in args if a not in ("--max-tokens", "500")],
                    "--tokens-per-step", "1000", "--out-dir", str(tmp_path / "b")])
    assert "--max-tokens 500 = up to 1,000 padded" in capsys.readouterr().err
    assert _weights(Path(summary["checkpoint"]))["data"]["max_tokens"] == 500
    start = _log(tmp_path / "b")[0]
    assert (start["max_tokens"], start["tokens_per_step"]) == (500, 1000)
    with pytest.raises(ValueError, match="--max-tokens .* or --tokens-per-step .*, not both"):
        main([*args, "--tokens-per-step", "1000", "--out-dir", str(tmp_path / "c")])


def test_deterministic_flag_is_accepted_reproducible_and_restored(tmp_path, one_thread):
    assert not torch.are_deterministic_algorithms_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    args = [*COMMON, "--steps", "3", "--n-train", "200", "--deterministic"]
    runs = [main([*args, "--out-dir", str(tmp_path / name)]) for name in ("a", "b")]
    a, b = (_weights(Path(r["checkpoint"]))["model"] for r in runs)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert _log(tmp_path / "a")[0]["deterministic"] is True  # it was on during the run
    assert not torch.are_deterministic_algorithms_enabled()  # and is off again
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == cublas


def _parallel_text(folder: Path, seed: int, n: int = 120) -> tuple[Path, Path]:
    """Two aligned files of n generated 'sentences' (different text for each seed)."""
    from aiayn.learning.data import date_pairs

    folder.mkdir(parents=True, exist_ok=True)
    pairs = date_pairs(n, seed=seed)
    for name, side in (("train.en", 0), ("train.de", 1)):
        (folder / name).write_text("".join(f"{p[side]} ok\n" for p in pairs), encoding="utf-8")
    return folder / "train.en", folder / "train.de"


TEXT = ["--vocab-size", "300", "--max-tokens", "800", "--warmup", "10", "--no-progress",
        "--d-model", "32", "--d-ff", "64", "--n-layers", "1", "--max-len", "40"]


def test_resume_refuses_other_data_of_the_same_size(tmp_path, one_thread):
    pytest.importorskip("tokenizers")
    src, tgt = _parallel_text(tmp_path / "a", seed=1)
    other_src, _ = _parallel_text(tmp_path / "b", seed=2)  # as many lines, other sentences
    out = ["--out-dir", str(tmp_path / "run"), "--steps", "1"]
    main([*TEXT, *out, "--train-src", str(src), "--train-tgt", str(tgt)])
    with pytest.raises(ValueError, match=r"other data.*train_src_sha256=\w{12}\.\.\., this run has "
                       r"\w{12}\.\.\. \(--train-src, the file's bytes\).*pairs_sha256"):
        main([*TEXT, *out, "--resume", "--train-src", str(other_src), "--train-tgt", str(tgt)])
    # The same files resume (to step 2); the date task's fingerprint is that of its pairs.
    main([*TEXT, "--out-dir", str(tmp_path / "run"), "--steps", "2", "--resume",
          "--train-src", str(src), "--train-tgt", str(tgt)])
    state = _weights(distributed.latest_checkpoint(tmp_path / "run"))
    assert state["step"] == 2 and state["data"]["train_src_sha256"] == distributed.file_sha256(src)


def test_vocabulary_is_ready_before_the_process_group_is_created(tmp_path, one_thread, monkeypatch):
    pytest.importorskip("tokenizers")
    src, tgt = _parallel_text(tmp_path / "data", seed=1)
    seen = []
    real_init = distributed.init_distributed

    def recording_init(device="auto"):
        seen.append((tmp_path / "run" / "tokenizer.json").is_file())
        return real_init(device)

    monkeypatch.setattr(distributed, "init_distributed", recording_init)
    main([*TEXT, "--out-dir", str(tmp_path / "run"), "--steps", "1",
          "--train-src", str(src), "--train-tgt", str(tgt)])
    assert seen == [True]


def test_waiting_rank_names_the_file_and_the_fix(tmp_path, monkeypatch):
    from aiayn.train.subword import shared_vocabulary

    monkeypatch.setenv("RANK", "1")
    with pytest.raises(TimeoutError, match=r"rank 1 waited 0.2 s for rank 0 to write the BPE "
                       r"vocabulary .*tokenizer.json: .*--vocab-timeout SECONDS.*shared file system"):
        shared_vocabulary(tmp_path / "tokenizer.json", [], 300, rank=1, timeout=0.2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Each process: rank 0 is busy for longer than the process group's timeout before it has
# the vocabulary (as learning BPE on WMT takes longer than NCCL's 10 minutes); rank 1 waits
# for the file, not in a collective, so the group's short timeout is never hit.
VOCAB_WORKER = textwrap.dedent("""
    import datetime, os, sys, time
    import torch, torch.distributed as dist
    from aiayn.train.subword import shared_vocabulary
    rank, vocab, src, tgt = int(os.environ["RANK"]), *sys.argv[1:]
    if rank == 0:
        time.sleep(4)  # longer than the group's timeout below
    tokenizer = shared_vocabulary(vocab, [src, tgt], 300, rank, timeout=120)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=2))
    total = torch.tensor([len(tokenizer)])
    dist.all_reduce(total)
    print(int(total), len(tokenizer))
    dist.destroy_process_group()
""")


def test_two_gloo_processes_share_a_vocabulary_learned_longer_than_the_group_timeout(tmp_path):
    pytest.importorskip("tokenizers")
    src, tgt = _parallel_text(tmp_path / "data", seed=1)
    env = {**ENV, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    command = [sys.executable, "-c", VOCAB_WORKER, str(tmp_path / "tokenizer.json"), str(src), str(tgt)]
    procs = [subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (1, 0)]  # rank 1 first: it must wait
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    (n_sum, n), = {tuple(int(v) for v in out.split()) for out, _ in outputs}
    assert n_sum == 2 * n  # both ranks loaded the same vocabulary, then met in the group
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "tokenizer.json"]  # no temp file


def test_torchrun_learns_the_vocabulary_once_and_trains_on_text(tmp_path):
    pytest.importorskip("tokenizers")
    src, tgt = _parallel_text(tmp_path / "data", seed=1)
    out = tmp_path / "run"
    result = _train(out, *TEXT, "--steps", "2", "--train-src", str(src), "--train-tgt", str(tgt),
                    nproc=2)
    assert "2 process(es) x --accum-steps 1 x --max-tokens 800 = up to 1,600" in result.stderr
    start = next(r for r in _log(out) if r["event"] == "start")
    assert start["world_size"] == 2 and start["task"] == "text"
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".pt") == ["log.jsonl",
                                                                         "tokenizer.json"]


# ------------------------------------------------------------------------- checkpoints


def test_crash_mid_write_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    first = distributed.save_rotating({"step": 1, "w": torch.arange(4.0)}, tmp_path, 1)

    def crashing_save(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")  # some bytes, then the process dies
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        distributed.save_rotating({"step": 2}, tmp_path, 2)
    monkeypatch.undo()
    assert distributed.latest_checkpoint(tmp_path) == first
    assert torch.equal(torch.load(first, weights_only=False)["w"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # temp file removed
    # A process killed outright leaves its temporary file behind: it is never "latest".
    (tmp_path / f".checkpoint_00000003.pt.{os.getpid()}.tmp").write_bytes(b"garbage")
    assert distributed.latest_checkpoint(tmp_path) == first


def test_overwrite_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    distributed.atomic_save({"v": 1}, path)
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append((a, b)) or real_replace(a, b))
    distributed.atomic_save({"v": 2}, path)
    (src, dst), = replaced
    assert Path(src).parent == path.parent and Path(dst) == path  # renamed within one folder
    assert torch.load(path, weights_only=False) == {"v": 2}


def test_keep_last_k(tmp_path):
    for step in (10, 20, 30, 40, 50):
        distributed.save_rotating({"step": step}, tmp_path, step, keep_last=2)
    assert [s for s, _ in distributed.list_checkpoints(tmp_path)] == [40, 50]
    assert torch.load(distributed.latest_checkpoint(tmp_path), weights_only=False) == {"step": 50}
    with pytest.raises(ValueError, match="keep_last"):
        distributed.save_rotating({}, tmp_path, 60, keep_last=0)


def test_rng_states_round_trip():
    import random

    import numpy as np

    states = distributed.rng_states()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    distributed.set_rng_states(states)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_single_process_without_torchrun(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    ctx = distributed.init_distributed("cpu")
    assert (ctx.rank, ctx.world_size, ctx.backend, ctx.is_main, ctx.distributed) == (
        0, 1, None, True, False)
    assert distributed.all_reduce_sum(ctx, [1.0, 2.0]) == [1.0, 2.0]


def test_bf16_autocast_keeps_float32_weights(tmp_path, one_thread):
    summary = main([*COMMON, "--out-dir", str(tmp_path), "--steps", "2", "--n-train", "200",
                    "--precision", "bf16"])
    assert summary["precision"] == "bf16" and summary["train_loss"] > 0
    state = _weights(Path(summary["checkpoint"]))
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nccl_on_one_gpu_with_bf16(tmp_path):
    _train(tmp_path, "--steps", "3", "--device", "cuda", nproc=1)  # plain process
    out = tmp_path / "ddp"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         "-m", "aiayn.train", *COMMON, "--out-dir", str(out), "--steps", "3", "--device", "cuda"],
        env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    start = _log(out)[0]
    expected = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    assert start["world_size"] == 1 and start["precision"] == expected
    assert distributed.latest_checkpoint(out).name == "checkpoint_00000003.pt"
