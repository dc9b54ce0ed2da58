import pytest
import torch
from torch import nn

from aiayn.learning.training import fit


def _regression_batch(step: int):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 3, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]])


def test_fit_learns_a_linear_map_and_returns_one_loss_per_step():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    losses = fit(model, _regression_batch, nn.functional.mse_loss, n_steps=300, lr=0.05)
    assert len(losses) == 300
    assert losses[-1] < 1e-3 < losses[0]
    assert not model.training  # left in eval mode


def test_fit_rejects_bad_arguments():
    model = nn.Linear(3, 1)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        fit(model, _regression_batch, nn.functional.mse_loss, n_steps=0)
    with pytest.raises(ValueError, match="lr must be positive"):
        fit(model, _regression_batch, nn.functional.mse_loss, n_steps=1, lr=0.0)


def test_fit_stops_on_a_non_finite_loss():
    model = nn.Linear(3, 1)

    def nan_loss(output, target):
        return (output * float("nan")).sum()

    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        fit(model, _regression_batch, nan_loss, n_steps=5)


# ------------------------------------------------------------ chapter 7: the paper's recipe

import math  # noqa: E402

from aiayn import Transformer, TransformerConfig  # noqa: E402
from aiayn.learning.training import (  # noqa: E402
    Seq2SeqTrainer,
    label_smoothed_cross_entropy,
    load_checkpoint,
    noam_lr,
    noam_scheduler,
    paper_optimizer,
    save_checkpoint,
    smoothed_targets,
    smoothing_floor,
    teacher_forcing_step,
)


def test_label_smoothing_matches_torch_and_ignores_padding():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 9, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 9, (4, 6), generator=g)
    targets[:, 4:] = 0  # padding
    ours = label_smoothed_cross_entropy(logits, targets, 0.1, ignore_index=0)
    ref = nn.functional.cross_entropy(
        logits.reshape(-1, 9), targets.reshape(-1), ignore_index=0, label_smoothing=0.1
    )
    assert abs(ours.item() - ref.item()) < 1e-12
    # Padding positions have no influence.
    logits2 = logits.clone()
    logits2[:, 4:] = 100.0
    assert label_smoothed_cross_entropy(logits2, targets, 0.1, ignore_index=0) == ours
    with pytest.raises(ValueError, match="every target is ignore_index"):
        label_smoothed_cross_entropy(logits, torch.zeros_like(targets), ignore_index=0)


def test_the_best_smoothed_loss_is_the_entropy_of_the_smoothed_target():
    k, eps = 10, 0.1
    targets = torch.tensor([3, 7])
    q = smoothed_targets(targets, k, eps).double()
    assert torch.allclose(q.sum(-1), torch.ones(2, dtype=torch.float64))
    assert abs(q[0, 3].item() - (1 - eps + eps / k)) < 1e-7
    floor = smoothing_floor(k, eps)
    # Predicting q itself reaches the closed form, which is well above 0 ...
    at_q = label_smoothed_cross_entropy(q.log(), targets, eps)
    assert abs(at_q.item() - floor) < 1e-6 and floor > 0.3
    # ... a (nearly) one-hot "perfect" prediction does worse, and worse the surer it is.
    sure = [
        label_smoothed_cross_entropy(nn.functional.one_hot(targets, k).double() * c, targets, eps)
        for c in (10.0, 20.0, 40.0)
    ]
    assert floor + 0.1 < sure[0] < sure[1] < sure[2]
    # ... and nothing beats it.
    for seed in range(5):
        noise = torch.randn(2, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        assert label_smoothed_cross_entropy(q.log() + 0.3 * noise, targets, eps) > at_q
    assert smoothing_floor(k, 0.0) == 0.0


def test_noam_schedule_warms_up_then_decays():
    d, w = 512, 4000
    assert noam_lr(w, d) == pytest.approx((d * w) ** -0.5)
    assert noam_lr(w // 2, d) == pytest.approx(noam_lr(w, d) / 2)  # linear warm-up
    assert noam_lr(4 * w, d) == pytest.approx(noam_lr(w, d) / 2)  # inverse square root
    assert max(range(1, 3 * w), key=lambda s: noam_lr(s, d)) == w
    with pytest.raises(ValueError, match="step must be an int >= 1"):
        noam_lr(0, d)
    opt = paper_optimizer(nn.Linear(2, 2))
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    sched = noam_scheduler(opt, d_model=d, warmup=w)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([noam_lr(s, d, w) for s in range(1, 6)])


def _tiny_model(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, n_layers=1,
                            d_ff=32, dropout=dropout, max_len=32)
    return Transformer(cfg)


def _copy_batch(step):
    g = torch.Generator().manual_seed(step)
    body = torch.randint(3, 12, (16, 5), generator=g)
    src = torch.cat([body, torch.full((16, 1), 2)], 1)
    tgt = torch.cat([torch.ones(16, 1, dtype=torch.long), src], 1)  # <bos> body <eos>
    return src, tgt


def test_teacher_forcing_is_one_pass_over_shifted_targets():
    model = _tiny_model()
    src, tgt = _copy_batch(0)
    calls = []
    handle = model.decoder.register_forward_hook(lambda m, a, o: calls.append(a[0].shape))
    loss, correct, total = teacher_forcing_step(model, src, tgt)
    handle.remove()
    assert calls == [(16, 6, 16)]  # one decoder pass over all 6 input positions
    assert total == 16 * 6 and 0 <= correct <= total and math.isfinite(loss.item())


def test_trainer_learns_to_copy_and_resumes_exactly(tmp_path):
    model = _tiny_model(dropout=0.1)
    trainer = Seq2SeqTrainer(model, warmup=50, factor=2.0)
    history = trainer.train(_copy_batch, 40)
    assert len(history["loss"]) == len(history["accuracy"]) == len(history["lr"]) == 40
    assert history["loss"][-1] < history["loss"][0]
    trainer.save(tmp_path / "ckpt.pt")
    trainer.train(_copy_batch, 10)
    resumed = Seq2SeqTrainer.load(tmp_path / "ckpt.pt")
    assert resumed.step == 40
    resumed.train(_copy_batch, 10)
    assert resumed.history["loss"] == pytest.approx(trainer.history["loss"], abs=1e-6)
    for a, b in zip(resumed.model.parameters(), trainer.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path):
    model = _tiny_model().eval()
    save_checkpoint(tmp_path / "m.pt", model)
    loaded, state = load_checkpoint(tmp_path / "m.pt")
    assert loaded.config == model.config and "trainer" not in state
    src, tgt = _copy_batch(1)
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(TypeError, match="needs a .config"):
        save_checkpoint(tmp_path / "x.pt", nn.Linear(2, 2))


def test_average_state_dicts_is_the_elementwise_mean():
    from aiayn.learning.training import average_state_dicts

    a, b = _tiny_model(seed=1).state_dict(), _tiny_model(seed=2).state_dict()
    avg = average_state_dicts([a, b])
    key = "generator.weight"
    assert torch.allclose(avg[key], (a[key] + b[key]) / 2)
    model = _tiny_model()
    model.load_state_dict(avg)  # a valid state_dict of the same model
    with pytest.raises(ValueError, match="at least one"):
        average_state_dicts([])
    with pytest.raises(ValueError, match="same keys"):
        average_state_dicts([a, {"x": torch.zeros(1)}])


def test_label_smoothing_can_leave_out_ids_that_are_never_targets():
    k, eps, never = 9, 0.1, (0, 1)  # e.g. <pad> and <bos>
    targets = torch.tensor([[3, 7, 0], [2, 8, 0]])  # 0: padding, ignored
    q = smoothed_targets(targets[:, :2], k, eps, exclude=never).double()
    assert torch.allclose(q.sum(-1), torch.ones(2, 2, dtype=torch.float64))
    assert (q[..., list(never)] == 0).all()
    assert abs(q[0, 0, 3].item() - (1 - eps + eps / (k - 2))) < 1e-7
    # the loss is the cross-entropy with that target, and its floor that of k - 2 ids
    logits = torch.randn(2, 3, k, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ours = label_smoothed_cross_entropy(logits, targets, eps, ignore_index=0, exclude=never)
    ref = -(q * torch.log_softmax(logits[:, :2], -1)).sum(-1).mean()
    assert abs(ours.item() - ref.item()) < 1e-6
    at_q = label_smoothed_cross_entropy(q.log(), targets[:, :2], eps, exclude=never)
    assert abs(at_q.item() - smoothing_floor(k - 2, eps)) < 1e-6
    assert smoothing_floor(k - 2, eps) < smoothing_floor(k, eps)
    # the default is unchanged: every id gets eps / k
    assert torch.equal(smoothed_targets(targets, k, eps, exclude=()), smoothed_targets(targets, k, eps))
    with pytest.raises(ValueError, match="exclude must hold class ids"):
        smoothed_targets(targets, k, eps, exclude=(k,))
    with pytest.raises(ValueError, match="a target id is in exclude"):
        label_smoothed_cross_entropy(logits, targets, eps, ignore_index=-100, exclude=never)
    with pytest.raises(ValueError, match="at least 2"):
        smoothed_targets(targets, k, eps, exclude=range(1, k))
