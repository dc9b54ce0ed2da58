"""Colab's environment, rebuilt here: Colab's Python and Colab's pinned packages, for
``tests/test_colab_like.py`` (whose docstring says why).

Standard library only (no pytest, no PyYAML): ``make test`` runs ``python3 tests/colab_env.py
FOLDER`` in the background, so that the 5.5 GB install (mostly disk and unpacking) runs beside the
unit tests and the book build.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


class ColabEnvError(RuntimeError):
    """The environment cannot be built here (the message says why and what to install)."""


# Colab's runtime as Google publishes it: github.com/googlecolab/backend-info,
# os-info.txt and pip-freeze.txt (2026-08). To follow Colab, change these lines.
COLAB_PYTHON = "3.13"
COLAB_RUNTIME = {
    # What the chapters use. torch: Colab has 2.11.0 (+cpu on its CPU runtime, +cu128 on
    # its GPU runtime), both from PyTorch's own index, which is not reachable here. We use
    # the project's torch==2.13.0, the version the committed outputs were computed with,
    # so nbval compares Colab's notebook stack rather than two torch releases' rounding.
    # On Python 3.13 it is PyPI's build (CUDA libraries, ~4.7 GB; it computes on the CPU
    # here). The local CPU wheel of `make venv` exists only for Python 3.11.
    "torch": "2.13.0",
    "numpy": "2.1.3",
    "matplotlib": "3.10.0",
    "tqdm": "4.67.3",
    # The kernel, the widgets and what displays outputs.
    "ipywidgets": "7.7.1",
    "ipython": "7.34.0",
    "ipykernel": "6.17.1",
    "jupyter_client": "7.4.9",
    "traitlets": "5.7.1",
    "widgetsnbextension": "3.6.10",
    "jupyterlab_widgets": "3.0.16",
    "notebook": "6.5.7",
    "jupyter_core": "5.9.1",
    "nbformat": "5.11.1",
    "nbclient": "0.10.4",
    "pyzmq": "26.2.1",
    "tornado": "6.5.7",
    "matplotlib-inline": "0.2.2",
    "pillow": "11.3.0",
    # Preinstalled, pinned so that nothing installed moves them: transformers, safetensors and
    # tokenizers, which chapter 10 uses; plotly and altair, which the book does not.
    "transformers": "5.15.0",
    "safetensors": "0.8.0",
    "tokenizers": "0.22.2",
    "plotly": "5.24.1",
    "altair": "5.5.0",
    # Preinstalled, and used by the checker below.
    "pytest": "8.4.2",
    "sphinx": "8.2.3",
}
# ... plus the checker, which a Colab reader does not need: nbval, and MyST-NB so that
# aiayn.glue records the numbers the book's prose shows and nbval compares them too.
# (Without MyST-NB, as in Colab, glue is a no-op: tests/test_utils.py checks that path,
# and test_chapters_glue_only_through_aiayn below that no chapter needs MyST-NB.)
# They are installed with COLAB_RUNTIME as pip constraints: one that needed a newer
# IPython (say) could not move it, and the install would fail instead.
CHECKER_PACKAGES = ["nbval>=0.11", "myst-nb>=1,<2"]
SITECUSTOMIZE = (
    "import sys, types\n"
    "# Stand-in for Colab: the chapters' first cell checks for this module.\n"
    "sys.modules.setdefault('google.colab', types.ModuleType('google.colab'))\n"
)



def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; raise ColabEnvError with its output's tail if it fails."""
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise ColabEnvError(f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-4000:]}\n"
                            f"{result.stderr[-4000:]}")
    return result


def _pyenv_root() -> str:
    if os.environ.get("PYENV_ROOT"):
        return os.environ["PYENV_ROOT"]
    if shutil.which("pyenv"):
        found = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.strip()
    return str(Path.home() / ".pyenv")


def _colab_interpreter() -> str:
    """Colab's Python: python3.13 on PATH if it runs, else pyenv's newest 3.13.x.

    Fails, never skips: without it this layer would check nothing."""
    name = f"python{COLAB_PYTHON}"
    candidates = [shutil.which(name)]  # a pyenv shim fails unless 3.13 is selected
    installed = glob.glob(os.path.join(_pyenv_root(), "versions", f"{COLAB_PYTHON}.*", "bin", name))
    patch = re.compile(rf"{re.escape(COLAB_PYTHON)}\.(\d+)$")  # not 3.13.0t (free-threaded)
    installed = [p for p in installed if patch.match(Path(p).parents[1].name)]
    candidates += sorted(installed, key=lambda p: int(patch.match(Path(p).parents[1].name)[1]),
                         reverse=True)
    probe = "import ensurepip, sys, venv; print(sys.executable); print('%d.%d' % sys.version_info[:2])"
    for candidate in filter(None, candidates):
        found = subprocess.run([candidate, "-c", probe], capture_output=True, text=True)
        lines = found.stdout.splitlines()
        if found.returncode == 0 and lines[-1:] == [COLAB_PYTHON]:
            return lines[0]
    raise ColabEnvError(
        f"Colab runs Python {COLAB_PYTHON}, and no working {name} (with venv and ensurepip) "
        f"was found on PATH or under pyenv ({_pyenv_root()}/versions). Install it, e.g. "
        f"`pyenv install {COLAB_PYTHON}` or your system's {name} and {name}-venv packages."
    )


def _pins() -> list[str]:
    return [f"{name}=={version}" for name, version in COLAB_RUNTIME.items()]


def _installer(python: Path) -> list:
    """The command that installs into ``python``'s environment: uv when `make venv` put it in
    .venv (it downloads and unpacks in parallel: measured, this environment in 12 s of wall time
    and 19 s of CPU, against pip's 65 s and 62 s, with the same versions), else pip. Neither
    writes byte-code for the 5 GB installed: the kernels compile only what they import, once
    per worker (_clean_env). The chapters' own first cell installs aiayn with the
    environment's pip, as in Colab."""
    uv = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "uv"
    if uv.exists():
        return [uv, "pip", "install", "--quiet", "--python", python]
    return [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]


def _build_colab_env(root: Path) -> None:
    """``root/venv``: Colab's Python with Colab's pinned packages, the checker (installed
    under those pins as constraints), and a stand-in google.colab."""
    env_dir = root / "venv"
    run([_colab_interpreter(), "-m", "venv", env_dir])
    constraints = root / "colab-constraints.txt"
    constraints.write_text("\n".join(_pins()) + "\n")
    python = env_dir / "bin" / "python"
    run([*_installer(python), "-c", constraints, *_pins(), *CHECKER_PACKAGES], timeout=1800)
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(site.stdout.strip(), "sitecustomize.py").write_text(SITECUSTOMIZE)


# `make test` builds the environment ahead, from its first step, in the background while the
# other set-up steps, the unit tests and the book build run (the install is mostly disk and
# unpacking), into the folder this variable names; `make nbval` alone builds it in the session's own folder.
PREBUILT = "AIAYN_COLAB_ENV"


def colab_template_dir(basetemp: Path) -> Path:
    """Where the session's one built environment lives: the prebuilt folder ``$AIAYN_COLAB_ENV``
    if set; else beside the xdist workers' own temporary folders (their common parent), or in
    the session's folder without xdist."""
    if os.environ.get(PREBUILT):
        return Path(os.environ[PREBUILT]).resolve()
    shared = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    return shared / "colab-template"


def _signature() -> str:
    """What a built environment must match to be reused: Colab's Python and every pin."""
    return json.dumps({"python": COLAB_PYTHON, "pins": _pins(), "checker": CHECKER_PACKAGES})


def build_template(template: Path) -> None:
    """Build the environment into ``template`` once, under a lock; reuse one already built
    with the same pins (``template/ready`` holds them), rebuild one built with others."""
    template.mkdir(parents=True, exist_ok=True)
    with (template / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = template / "ready"
        if not (ready.exists() and ready.read_text() == _signature()):
            ready.unlink(missing_ok=True)
            shutil.rmtree(template / "venv", ignore_errors=True)  # a failed or stale build
            _build_colab_env(template)
            ready.write_text(_signature())


if __name__ == "__main__":
    # `make test`: python3 tests/colab_env.py FOLDER
    build_template(Path(sys.argv[1]))
