"""Every notebook runs the way a Colab reader runs it.

Colab starts from an environment that already has PyTorch, NumPy, Matplotlib and
ipywidgets, but not this repository. A chapter's first cell, seeing
``google.colab`` in ``sys.modules``, installs ``aiayn`` from the repository's git
URL. These tests rebuild that situation:

- a fresh virtual environment with Colab's preinstalled packages (PyTorch as the
  project's pinned CPU build) and a ``sitecustomize`` that registers a stand-in
  ``google.colab`` module, so the Colab branch is taken;
- the notebook copied alone into an empty folder far from the repository, so it
  cannot import ``src/`` or read files next to it;
- the first cell's install pointed at this checkout's git URL (the cell reads
  ``AIAYN_REPO_URL``; in Colab it is unset and the URL written in the cell is used).

In that environment each notebook runs under strict ``pytest --nbval`` (with
``tests/nbval_sanitize.cfg``): one execution proves both that the chapter runs the
way a Colab reader runs it and that it reproduces the outputs committed with it,
which are what the HTML book shows. ``make nbval`` runs these tests.

They also check that the URL written in every notebook's Colab cell is the one
``_config.yml`` gives the book (its launch buttons use that one).
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "book").glob("*.ipynb"))
# What Colab has before the chapter's first cell runs (torch pinned to the project's build).
COLAB_PACKAGES = ["torch==2.13.0", "numpy", "matplotlib", "ipywidgets", "ipykernel",
                  "nbclient", "tqdm"]
# ... plus the checker, which a Colab reader does not need: nbval, and MyST-NB so that
# aiayn.glue records the numbers the book's prose shows and nbval compares them too.
# (Without MyST-NB, as in Colab, glue is a no-op: tests/test_utils.py checks that path,
# and test_chapters_glue_only_through_aiayn below that no chapter needs MyST-NB.)
CHECKER_PACKAGES = ["pytest", "nbval", "myst-nb>=1,<2"]
SANITIZE = REPO / "tests" / "nbval_sanitize.cfg"
SITECUSTOMIZE = (
    "import sys, types\n"
    "# Stand-in for Colab: the chapters' first cell checks for this module.\n"
    "sys.modules.setdefault('google.colab', types.ModuleType('google.colab'))\n"
)


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
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


@pytest.fixture(scope="session")
def colab_python(tmp_path_factory) -> Path:
    """A fresh environment with what Colab preinstalls, and a stand-in google.colab."""
    env_dir = tmp_path_factory.mktemp("colab") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *COLAB_PACKAGES,
          *CHECKER_PACKAGES])
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(site.stdout.strip(), "sitecustomize.py").write_text(SITECUSTOMIZE)
    return python


def _clean_env() -> dict:
    """The environment of a Colab reader: no PYTHONPATH, no virtual env of ours."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND", "JUPYTER_PATH"}}
    env["AIAYN_REPO_URL"] = f"file://{REPO}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_reproduces_its_outputs_in_a_colab_like_environment(colab_python, path, tmp_path):
    workdir = tmp_path / "far" / "away"
    workdir.mkdir(parents=True)
    notebook = workdir / path.name
    notebook.write_bytes(path.read_bytes())
    # Strict nbval: every output not tagged nbval-ignore-output must match the committed one.
    _run([colab_python, "-m", "pytest", "--nbval", notebook.name,
          "--nbval-sanitize-with", str(SANITIZE), "-p", "no:cacheprovider", "-q"],
         cwd=workdir, env=_clean_env(), timeout=1800)
    # The package the chapter used is the one its first cell installed, from git.
    where = _run([colab_python, "-c", "import aiayn; print(aiayn.__file__)"],
                 cwd=workdir, env=_clean_env())
    assert str(colab_python.parents[1]) in where.stdout, where.stdout
    assert sorted(p.name for p in workdir.iterdir()) == [path.name], "the chapter wrote files"
