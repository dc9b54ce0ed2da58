"""Shared fixtures and helpers for the unit tests of ``aiayn``.

* ``to_torch_layout`` translates our parameter names (and gradients) to those of
  ``torch.nn.MultiheadAttention`` / ``TransformerEncoderLayer`` / ... so that weights
  are copied across and gradients compared with one function.
* ``assert_parity`` checks an absolute max error against the dtype's tolerance and
  records the largest error seen, which is printed at the end of the run.
* ``DEVICE_DTYPES`` parametrizes the parity tests over CPU float64/float32 and a CUDA
  float32 variant that is marked ``cuda`` and skipped without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: no windows, deterministic PNGs

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from aiayn.inspection import to_torch_names  # noqa: E402

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

# Largest absolute error measured by assert_parity, per "dtype" or "dtype (device)".
PARITY_MAX: dict[str, float] = {}
# Seconds of each chapter's cells under nbval (tests/test_colab_like.py): notebook name ->
# (all cells, the cells of its solutions). Reported at the end of the run.
NOTEBOOK_SECONDS: dict[str, tuple[float, float]] = {}
# Chapters whose nbval kernel died and that were run again (tests/test_colab_like.py).
KERNEL_DEATHS: list[str] = []

CUDA_AVAILABLE = torch.cuda.is_available()
_CUDA_MARKS = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_AVAILABLE, reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]

# (device, dtype) pairs for the parity tests that also run on a GPU (float32 only there).
DEVICE_DTYPES = [
    pytest.param("cpu", torch.float64, id="cpu-float64"),
    pytest.param("cpu", torch.float32, id="cpu-float32"),
    pytest.param("cuda", torch.float32, id="cuda-float32", marks=_CUDA_MARKS),
]
DTYPES = [
    pytest.param(torch.float64, id="float64"),
    pytest.param(torch.float32, id="float32"),
]


# ------------------------------------------------ the order of the long notebook tests

# Seconds of a non-notebook test marked `notebooks` (the explorer tests under ipywidgets 7).
OTHER_NOTEBOOK_TEST_SECONDS = 60.0


def notebook_seconds(path: Path) -> float:
    """How long ``path`` took to execute when its outputs were last committed: the sum of
    its cells' recorded times (nbclient stores when each cell started and replied)."""
    import json
    from datetime import datetime

    total = 0.0
    for cell in json.loads(path.read_text())["cells"]:
        times = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            start, end = (datetime.fromisoformat(times[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            total += (end - start).total_seconds()
    return total


def longest_first(costs: list[float], workers: int = 2) -> list[int]:
    """An order of the tests (indices into ``costs``) for pytest-xdist's `load` scheduling
    that approximates longest-processing-time-first: each worker is first given two tests
    (xdist keeps two queued per worker), so each gets one of the longest tests and one of
    the shortest; the rest follow longest first, to whichever worker frees up."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    if len(order) < 2 * workers:
        return order
    longest, rest = order[:workers], order[workers:]
    shortest, middle = rest[-workers:], rest[:-workers]
    first = [i for pair in zip(longest, shortest, strict=True) for i in pair]
    return first + middle


def pytest_collection_modifyitems(config, items):
    """Run the notebook tests (`make nbval`, two workers) longest first, so that the two
    longest chapters start at once on different workers instead of one after the other."""
    slots = [i for i, item in enumerate(items) if item.get_closest_marker("notebooks")]
    if len(slots) < 4:
        return
    tests = [items[i] for i in slots]
    costs = []
    for item in tests:
        path = getattr(item, "callspec", None) and item.callspec.params.get("path")
        costs.append(notebook_seconds(path) if isinstance(path, Path)
                     else OTHER_NOTEBOOK_TEST_SECONDS)
    for slot, index in zip(slots, longest_first(costs), strict=True):
        items[slot] = tests[index]


@pytest.fixture(autouse=True)
def _no_tf32():
    """TF32 matmuls (on by default for some GPU ops) would miss the 1e-5 float32 tolerance."""
    if not CUDA_AVAILABLE:
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# --------------------------------------------------------------------------- parity


def _key(dtype: torch.dtype, device: torch.device | str) -> str:
    name = str(dtype).removeprefix("torch.")
    return name if torch.device(device).type == "cpu" else f"{name} ({torch.device(device).type})"


def assert_parity(ours: torch.Tensor, theirs: torch.Tensor, label: str = "") -> float:
    """Absolute max error within ``TOL[dtype]``; records the error for the final summary."""
    assert ours.shape == theirs.shape, f"{label}: shapes {tuple(ours.shape)} != {tuple(theirs.shape)}"
    assert ours.dtype == theirs.dtype, f"{label}: dtypes {ours.dtype} != {theirs.dtype}"
    assert torch.isfinite(ours).all(), f"{label}: non-finite values in ours"
    err = (ours.detach() - theirs.detach()).abs().max().item() if ours.numel() else 0.0
    key = _key(ours.dtype, ours.device)
    PARITY_MAX[key] = max(PARITY_MAX.get(key, 0.0), err)
    tol = TOL[ours.dtype]
    assert err <= tol, f"{label}: max abs error {err:.3e} > {tol:.0e} ({ours.dtype})"
    return err


# Our names -> torch.nn's names (w_q/w_k/w_v -> in_proj, w_o -> out_proj, ...), for a
# state dict or a dict of gradients; the package's own bridge, tested by every parity test.
to_torch_layout = to_torch_names


def randomize_(module: nn.Module, seed: int = 0, std: float = 0.3) -> nn.Module:
    """Random weights everywhere (LayerNorm gains near 1) so that a swapped or missing
    parameter cannot go unnoticed, as it could with PyTorch's ones/zeros defaults."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64) * std
            is_gain = "norm" in name and name.endswith("weight")
            p.copy_((noise + 1.0) if is_gain else noise)
    return module


def copy_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Load our weights into the torch.nn module (strict: every parameter must map)."""
    state = {k: v for k, v in ours.state_dict().items()}
    theirs.load_state_dict(to_torch_layout(state), strict=True)


def compare_modules(
    ours: nn.Module,
    theirs: nn.Module,
    run_ours: Callable[..., torch.Tensor | Sequence[torch.Tensor]],
    run_theirs: Callable[..., torch.Tensor | Sequence[torch.Tensor]],
    inputs: Sequence[torch.Tensor],
    label: str = "",
) -> None:
    """Outputs, input gradients and parameter gradients of two modules must agree.

    ``run_*`` take the inputs and return one tensor or a tuple of tensors; the loss
    is a fixed random projection of every output, so every output entry carries gradient.
    The projection is divided by sqrt(number of rows), like a mean over positions, so that
    gradients stay O(1) and an absolute tolerance means the same as for the outputs.
    """
    leaves = []
    results = []
    for run in (run_ours, run_theirs):
        xs = [x.detach().clone().requires_grad_(True) for x in inputs]
        outs = run(*xs)
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        leaves.append(xs)
        results.append(outs)
    gen = torch.Generator().manual_seed(1234)
    cotangents = [
        (torch.randn(o.shape, generator=gen, dtype=torch.float64) / (o.numel() / o.shape[-1]) ** 0.5).to(o)
        for o in results[0]
    ]
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        assert_parity(a, b, f"{label} output {i}")
    for outs in results:
        sum((o * g).sum() for o, g in zip(outs, cotangents, strict=True)).backward()
    for i, (xa, xb) in enumerate(zip(*leaves, strict=True)):
        assert_parity(xa.grad, xb.grad, f"{label} d/d input {i}")
    ours_grads = to_torch_layout({n: p.grad for n, p in ours.named_parameters()})
    theirs_grads = {n: p.grad for n, p in theirs.named_parameters()}
    assert ours_grads.keys() == theirs_grads.keys()
    for name, grad in theirs_grads.items():
        assert grad is not None, f"{label}: no gradient for torch's {name}"
        assert_parity(ours_grads[name], grad, f"{label} d/d {name}")


# ------------------------------------------------------------------- run summary


def _summary_line(values: dict[str, float]) -> str:
    if not values:
        return "largest parity error: no parity checks ran"
    order = sorted(values, key=lambda k: (k != "float32", k != "float64", k))
    return "largest parity error " + ", ".join(f"{k}={values[k]:.3e}" for k in order)


def pytest_sessionfinish(session):
    # On a pytest-xdist worker, ship this worker's maxima to the controller.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["parity_max"] = dict(PARITY_MAX)
        workeroutput["notebook_seconds"] = dict(NOTEBOOK_SECONDS)
        workeroutput["kernel_deaths"] = list(KERNEL_DEATHS)
        return
    # The controller (or a run without xdist): remove the Colab-like environment that
    # tests/test_colab_like.py built for the session (5.5 GB).
    # A prebuilt one ($AIAYN_COLAB_ENV, `make test`) stays for the next run to reuse.
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None and factory._basetemp is not None:
        import shutil

        shutil.rmtree(factory.getbasetemp() / "colab-template", ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # pytest-xdist controller: merge each worker's maxima.
    for key, value in getattr(node, "workeroutput", {}).get("parity_max", {}).items():
        PARITY_MAX[key] = max(PARITY_MAX.get(key, 0.0), value)
    NOTEBOOK_SECONDS.update(getattr(node, "workeroutput", {}).get("notebook_seconds", {}))
    KERNEL_DEATHS.extend(getattr(node, "workeroutput", {}).get("kernel_deaths", []))


def _solutions_line(seconds: dict[str, tuple[float, float]], workers: int = 2) -> str:
    """What the chapters' worked solutions cost: their cells' seconds, in all and per chapter.
    nbval runs ``workers`` chapters at a time, so they add about 1/workers of that to the wall
    time of the run."""
    total = sum(all_cells for all_cells, _ in seconds.values())
    solutions = sum(solution for _, solution in seconds.values())
    per_chapter = ", ".join(f"{name[:2]} {solution:.0f}" for name, (_, solution)
                            in sorted(seconds.items()) if solution)
    return (f"solutions: {solutions:.0f} s of the {total:.0f} s the chapters' cells ran "
            f"({solutions / max(total, 1e-9):.0%}; about {solutions / workers:.0f} s of wall time "
            f"on {workers} workers); by chapter: {per_chapter}")


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_sep("-", "parity")
    terminalreporter.write_line(_summary_line(PARITY_MAX))
    if NOTEBOOK_SECONDS:
        terminalreporter.write_sep("-", "notebook cells")
        terminalreporter.write_line(_solutions_line(NOTEBOOK_SECONDS))
    if KERNEL_DEATHS:
        terminalreporter.write_line(f"the kernel died, and the chapter was run again: "
                                    f"{', '.join(KERNEL_DEATHS)}", yellow=True)


# --------------------------------------------------------------- the browser checks

# Debian's Chromium, offline (test_html.py and test_jupyterlab.py).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
