"""set_seed, get_device, glue and the input-checking helpers."""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest
import torch

from aiayn import get_device, glue, set_seed
from aiayn.utils import check_tensor, check_tokens


def draw():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist(), torch.randn(2).tolist()


def test_set_seed_reproduces_python_numpy_and_torch():
    set_seed(123)
    first = draw()
    set_seed(123)
    assert draw() == first
    set_seed(124)
    assert draw() != first


def test_set_seed_reproduces_model_init_and_dropout():
    def run():
        set_seed(7)
        layer = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        return layer(torch.ones(2, 4))

    assert torch.equal(run(), run())


@pytest.mark.parametrize("bad", [1.5, "1", True, None])
def test_set_seed_rejects_non_int(bad):
    with pytest.raises(TypeError, match="seed must be an int, got"):
        set_seed(bad)


def test_get_device():
    device = get_device()
    assert isinstance(device, torch.device)
    assert device.type in {"cuda", "mps", "cpu"}
    if torch.cuda.is_available():
        assert device.type == "cuda"
    torch.zeros(1, device=device)  # usable


def test_get_device_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch.backends, "mps", None) is not None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert get_device() == torch.device("cpu")


# glue's contract changed in commit 523ba7d: it returns None (so that a glue call ending a
# cell prints nothing) instead of its value; these tests follow the source.


@pytest.mark.parametrize("value", [3, 0.25, "text", [1, 2]])
def test_glue_does_not_raise_outside_a_notebook(value):
    # myst_nb may or may not be installed; either way glue must not raise here.
    assert glue("test_value", value) is None


def test_glue_without_myst_nb(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # makes "import myst_nb" raise ImportError
    assert glue("x", 42) is None


def test_glue_passes_python_scalars_to_myst_nb(monkeypatch):
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=False: calls.append((name, value, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    glue("a", torch.tensor(2.5))
    glue("b", np.float64(0.125))
    glue("c", [1, 2], display=True)
    assert calls == [("a", 2.5, False), ("b", 0.125, False), ("c", [1, 2], True)]
    assert type(calls[0][1]) is float and type(calls[1][1]) is float


def test_check_tensor_messages():
    check_tensor("x", torch.zeros(2, 3), min_dim=2, ndim=2)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got ndarray"):
        check_tensor("x", np.zeros(3))
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        check_tensor("x", torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have 3 dimensions, got shape \(2, 3\)"):
        check_tensor("x", torch.zeros(2, 3), ndim=3)
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(3,\)"):
        check_tensor("x", torch.zeros(3), min_dim=2)
    with pytest.raises(ValueError, match=r"x must not be empty, got shape \(2, 0\)"):
        check_tensor("x", torch.zeros(2, 0))


def test_check_tokens_messages():
    check_tokens("src", torch.tensor([[0, 4]]), vocab_size=5, max_len=2)
    with pytest.raises(ValueError, match=r"src holds token ids in \[-1, 4\], expected ids in \[0, 4\]"):
        check_tokens("src", torch.tensor([[-1, 4]]), vocab_size=5)
    with pytest.raises(ValueError, match=r"src holds token ids in \[0, 5\], expected ids in \[0, 4\]"):
        check_tokens("src", torch.tensor([[0, 5]]), vocab_size=5)
    with pytest.raises(ValueError, match="src has length 3, longer than max_len=2"):
        check_tokens("src", torch.tensor([[0, 1, 2]]), vocab_size=5, max_len=2)
    with pytest.raises(ValueError, match=r"src must not be empty, got shape \(0, 3\)"):
        check_tokens("src", torch.zeros(0, 3, dtype=torch.long), vocab_size=5)
    with pytest.raises(TypeError, match="src must hold integer token ids, got dtype torch.bool"):
        check_tokens("src", torch.ones(1, 2, dtype=torch.bool), vocab_size=5)
    with pytest.raises(TypeError, match="src must be a torch.Tensor of token ids, got list"):
        check_tokens("src", [[1]], vocab_size=5)
