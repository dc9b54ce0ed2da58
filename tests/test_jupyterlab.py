"""One chapter run and read in a real JupyterLab, in headless Chromium.

Jupyter and Colab render a markdown cell as plain CommonMark, so the chapters' prose
carries each glued number as a literal followed by an invisible binding, an HTML
comment naming the glued value and its MyST-NB format::

    The query gives key 1 a weight of 0.81<!-- glue: soft_lookup_w1:.2f -->, so ...

This test copies chapter 2, without its outputs, into a temporary folder, serves it
with the JupyterLab of the running interpreter's environment (offline: no news feed,
no update check, no extension-manager listings; the browser may reach only the local
server) and, in headless Chromium (Playwright):

- runs every cell; the kernel must end idle, every code cell must have an execution
  count, and no cell may have an error output;
- checks that every solution is folded when the notebook opens (its heading collapsed, the
  cells under it hidden), and that one click on the first one's fold arrow shows that one;
- takes the first markdown cell with a binding and, for each binding in it, formats the
  value the kernel has just glued exactly as MyST-NB's ``{glue:text}`` role does; the
  literal before the binding must be that text, the rendered cell must show it, and no
  raw ``{glue``, ``<!--`` or ``glue:`` may be visible;
- then plants a wrong number in that cell, in the page, and checks that the same
  comparison reports it.

The rendered cell is always saved as ``test-artifacts/jupyterlab-bound-number.png``; on
a failure the browser console and the server log are saved there too. The server is
shut down through its API and every process it started must be gone afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from test_html import accessibility_violations, blocking_problems

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "02_scaled_dot_product_attention.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
SHOT = ARTIFACTS / "jupyterlab-bound-number.png"
RUN_TIMEOUT_MS = 240_000  # chapter 2 runs in well under a minute on two cores

# JupyterLab offline: no news feed, no update check, no PyPI listings of extensions.
LAB_OFFLINE = ["--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]
# User settings of a fresh profile: never ask to fetch news, never save the copy.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                     "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
}

# ------------------------------------------------------------------ the comparison

# The bindings are read, and values formatted, as ``make test`` checks the committed prose.
_spec = importlib.util.spec_from_file_location("prose_numbers", ROOT / "scripts" / "prose_numbers.py")
prose_numbers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("prose_numbers", prose_numbers)
_spec.loader.exec_module(prose_numbers)
BINDING = prose_numbers.BINDING
RAW = ("{glue", "<!--", "glue:")


def split_key(key: str) -> tuple[str, str] | None:
    """``NAME`` or ``NAME:FORMAT`` -> (name, format); None for another notebook's key."""
    name, spec, origin = prose_numbers.parse_key(key, CHAPTER)
    return None if origin != CHAPTER else (name, spec)


def glue_text(plain: str, spec: str) -> str:
    """The text MyST-NB's ``{glue:text}`` role shows for a glued text/plain."""
    return prose_numbers.format_plain_text(plain, spec)


def binding_problems(source: str, glued: dict[str, str], rendered: str) -> list[str]:
    """What is wrong with one markdown cell, given the kernel's glued text/plain values
    (by name) and the text the notebook shows for the cell. Empty when all is right."""
    problems = []
    for match in BINDING.finditer(source):
        parsed = split_key(match["key"])
        if parsed is None:
            continue
        name, spec = parsed
        if name not in glued:
            problems.append(f"{name}: bound in the prose but not glued by the kernel")
            continue
        try:
            text = glue_text(glued[name], spec)
        except (TypeError, ValueError) as exc:
            problems.append(f"{name}: cannot format {glued[name]!r} with {spec!r}: {exc}")
            continue
        before = source[:match.start()]
        written = re.search(r"\S*$", before).group()
        if not prose_numbers.shows(before, source[match.end():], text):
            problems.append(f"{name}: the prose says {written!r} before its binding, "
                            f"but the kernel's value shows as {text!r}")
        if text not in rendered:
            problems.append(f"{name}: the rendered cell does not show {text!r}")
    problems += [f"raw {raw!r} visible in the rendered cell" for raw in RAW if raw in rendered]
    return problems


def first_bound_cell(notebook: dict) -> tuple[int, str]:
    """Index and source of the first markdown cell with a (same-notebook) binding."""
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and any(
                split_key(m["key"]) for m in BINDING.finditer(source)):
            return index, source
    raise AssertionError("no markdown cell with a <!-- glue: NAME --> binding")


def committed_glue(notebook: dict) -> dict[str, str]:
    """The glued text/plain values of a notebook's saved outputs, by name."""
    return prose_numbers.glued_values(notebook)


def plant_wrong_number(source: str, text: str) -> tuple[str, str]:
    """The source with the first literal ``text`` before a binding changed; and the new text."""
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if digits:
        i = digits[-1]
        wrong = text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]
    else:
        wrong = text + "x"
    match = next(m for m in BINDING.finditer(source) if source[:m.start()].endswith(text))
    cut = match.start() - len(text)
    return source[:cut] + wrong + source[match.start():], wrong


def _hide_comments(markdown: str) -> str:
    """A stand-in for a renderer: HTML comments are invisible."""
    return re.sub(r"<!--.*?-->", "", markdown, flags=re.S)


# A planted failure that needs no browser: the committed chapter, right and tampered.
def test_comparison_accepts_the_chapter_and_reports_a_planted_wrong_number():
    notebook = json.loads(CHAPTER.read_text())
    _, source = first_bound_cell(notebook)
    glued = committed_glue(notebook)
    assert binding_problems(source, glued, _hide_comments(source)) == []

    name, spec = split_key(BINDING.search(source)["key"])
    text = glue_text(glued[name], spec)
    tampered, wrong = plant_wrong_number(source, text)
    problems = binding_problems(tampered, glued, _hide_comments(tampered))
    assert f"{name}: the prose says {wrong!r} before its binding, but the kernel's value " \
           f"shows as {text!r}" in problems
    assert f"{name}: the rendered cell does not show {text!r}" in problems
    # A longer number that merely ends with the right digits is wrong too.
    assert binding_problems(source.replace(text + "<!--", "1" + text + "<!--", 1), glued,
                            _hide_comments(source))
    # MyST left raw in the rendered text is reported.
    assert "raw '{glue' visible in the rendered cell" in binding_problems(
        source, glued, _hide_comments(source) + " {glue:text}`x`")


@pytest.mark.parametrize(("key", "parsed"), [
    ("soft_lookup_w1:.2f", ("soft_lookup_w1", ".2f")),
    ("n_params:,", ("n_params", ",")),
    ("plain_name", ("plain_name", "s")),
    ("01_rnn_limits.ipynb::rnn_steps:d", None),
])
def test_split_key(key, parsed):
    assert split_key(key) == parsed


# ------------------------------------------------------------------ the server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Lab:
    """A JupyterLab server on localhost, serving one copied notebook."""

    def __init__(self, root: Path, profile: Path, notebook: Path):
        self.notebook = notebook
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = profile / "server.log"
        for plugin, values in LAB_SETTINGS.items():
            path = profile / "settings" / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        # MPLBACKEND=Agg (the unit tests') would stop the kernel drawing inline figures.
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
        env.update(JUPYTERLAB_SETTINGS_DIR=str(profile / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(profile / "workspaces"),
                   JUPYTER_RUNTIME_DIR=str(profile / "runtime"))
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                   f"--port={self.port}", "--port-retries=0",
                   f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={root}", "--ServerApp.terminals_enabled=False",
                   "--expose-app-in-browser", *LAB_OFFLINE]
        if os.geteuid() == 0:  # containers and CI runners
            command.append("--allow-root")
        self._log_file = self.log.open("w")
        self.process = subprocess.Popen(command, env=env, cwd=root, stdin=subprocess.DEVNULL,
                                        stdout=self._log_file, stderr=subprocess.STDOUT)
        self.started: set[int] = set()

    def api(self, path: str, method: str = "GET") -> dict:
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - localhost
            body = response.read()
        return json.loads(body) if body else {}

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.process.returncode}):\n"
                                   f"{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                self.api("/api/status")
                return
            time.sleep(0.5)
        raise RuntimeError(f"jupyter lab did not answer in {timeout} s:\n"
                           f"{self.log.read_text()[-3000:]}")

    def shutdown(self) -> list[int]:
        """Stop the server through its API (it stops its kernels); kill what is left.
        Returns the processes that outlived the clean shutdown."""
        self.started |= _descendants(self.process.pid)
        with contextlib.suppress(OSError):
            self.api("/api/shutdown", method="POST")
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in self.started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = sorted(p for p in self.started if _alive(p))
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log_file.close()
        return left


@contextlib.contextmanager
def _serving(root: Path, profile: Path, notebook: Path):
    """A ready :class:`Lab`; shut down on exit, with no process of it left behind."""
    server = Lab(root, profile, notebook)
    try:
        server.wait_ready()
    except BaseException:
        server.shutdown()
        raise
    yield server
    left = server.shutdown()
    assert not left, f"processes left after the server's shutdown (killed): {left}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a copy of the chapter with its outputs and counts removed, so
    that every number the test reads comes from this run's kernel."""
    root = tmp_path_factory.mktemp("notebooks")
    profile = tmp_path_factory.mktemp("jupyter-profile")
    notebook = json.loads(CHAPTER.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    copy = root / CHAPTER.name
    copy.write_text(json.dumps(notebook, indent=1))
    with _serving(root, profile, copy) as server:
        yield server
    assert server.process.returncode == 0, \
        f"jupyter lab exited with {server.process.returncode}:\n{server.log.read_text()[-3000:]}"


# ------------------------------------------------------------------ in the page

# The notebook is open, its kernel started and idle.
READY = """
() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext || !panel.context.isReady) return false;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!kernel && kernel.status === 'idle' && panel.content.widgets.length > 0;
}
"""

RUN_ALL = """
() => {
  window.__runAll = null;
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    ok => { window.__runAll = {ok}; },
    err => { window.__runAll = {error: String(err)}; });
}
"""

# Run All has returned and the kernel has gone idle (its last outputs are in).
RUN_DONE = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session.kernel;
  return window.__runAll !== null && kernel.status === 'idle';
}
"""

# The live notebook model: execution counts, error outputs, glued values, sources.
MODEL = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.model.cells;
  const result = {path: panel.context.path, runAll: window.__runAll,
                  kernel: panel.sessionContext.session.kernel.status,
                  cells: [], glued: {}};
  for (let c = 0; c < cells.length; c++) {
    const cell = cells.get(c);
    const info = {type: cell.type, source: cell.sharedModel.getSource(),
                  count: cell.type === 'code' ? cell.executionCount : null, errors: []};
    if (cell.type === 'code') {
      for (let o = 0; o < cell.outputs.length; o++) {
        const out = cell.outputs.get(o).toJSON();
        if (out.output_type === 'error') {
          info.errors.push(`${out.ename}: ${out.evalue}`);
        }
        const scrap = out.metadata && out.metadata.scrapbook;
        if (scrap && out.data) {
          const plain = out.data[scrap.mime_prefix + 'text/plain'];
          result.glued[scrap.name] = Array.isArray(plain) ? plain.join('') : plain;
        }
      }
    }
    result.cells.push(info);
  }
  return result;
}
"""

# Show one markdown cell rendered and mark it for the locator.
SHOW_CELL = """
async ([index, source]) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const cell = notebook.widgets[index];
  if (source !== null) {
    cell.rendered = false;
    cell.model.sharedModel.setSource(source);
  }
  cell.rendered = true;
  await notebook.scrollToItem(index, 'start');
  document.querySelectorAll('[data-bound-cell]').forEach(e => e.removeAttribute('data-bound-cell'));
  cell.node.setAttribute('data-bound-cell', '');
}
"""


# Each solution heading (``### Solution N``): is it folded, and are the cells under it hidden.
SOLUTIONS = r"""
() => {
  const cells = window.jupyterapp.shell.currentWidget.content.widgets;
  const found = [];
  cells.forEach((cell, i) => {
    if (!/^### Solution \d+/.test(cell.model.sharedModel.getSource())) return;
    const under = [];
    for (let j = i + 1; j < cells.length; j++) {
      if (/^#{1,3} /.test(cells[j].model.sharedModel.getSource())
          && cells[j].model.type === 'markdown') break;
      under.push(cells[j].isHidden);
    }
    found.push({index: i, folded: cell.headingCollapsed === true, hidden: under});
  });
  return found;
}
"""

# Tag a cell's node and scroll it into view, so that Playwright can click in it.
TAG_CELL = """
async index => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  document.querySelectorAll('[data-solution-heading]').forEach(
      e => e.removeAttribute('data-solution-heading'));
  await notebook.scrollToItem(index, 'center');
  notebook.widgets[index].node.setAttribute('data-solution-heading', '');
}
"""


class LabPage:
    """The notebook open in JupyterLab, with what the browser reported."""

    def __init__(self, browser, lab: Lab):
        self.lab = lab
        self.console: list[str] = []
        self.external: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = page = self.context.new_page()
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda exc: self.console.append(f"exception: {exc}"))
        local = urlsplit(lab.url).netloc
        # Nothing may leave the machine; an attempt is recorded and aborted.
        page.route(lambda url: urlsplit(url).netloc not in (local, ""), self._block)

    def _block(self, route):
        self.external.append(route.request.url)
        route.abort()

    def open(self) -> None:
        url = f"{self.lab.url}/lab/tree/{self.lab.notebook.name}?token={self.lab.token}"
        self.page.goto(url, wait_until="domcontentloaded", timeout=60_000)
        self.page.wait_for_function(READY, timeout=90_000, polling=250)

    def run_all(self) -> dict:
        self.page.evaluate(RUN_ALL)
        self.page.wait_for_function(RUN_DONE, timeout=RUN_TIMEOUT_MS, polling=250)
        return self.page.evaluate(MODEL)

    def rendered_cell(self, index: int, source: str | None = None,
                      shows: str = "") -> tuple[str, object]:
        """The innerText of a markdown cell as rendered (after setting its source), once
        it has rendered and shows ``shows``."""
        self.page.evaluate(SHOW_CELL, [index, source])
        selector = "[data-bound-cell] .jp-MarkdownOutput"
        output = self.page.locator(selector)
        output.wait_for(state="visible", timeout=20_000)
        self.page.wait_for_function(
            "([sel, text]) => { const e = document.querySelector(sel);"
            " return !!e && e.innerText.trim().length > 0 && e.innerText.includes(text); }",
            arg=[selector, shows], timeout=20_000)
        return output.inner_text(), output

    def solutions(self) -> list[dict]:
        return self.page.evaluate(SOLUTIONS)

    def click_fold_button(self, index: int) -> None:
        """One click on the button "N cells hidden" that a folded heading ``index`` shows."""
        self.page.evaluate(TAG_CELL, index)
        self.page.locator("[data-solution-heading] .jp-showHiddenCellsButton").click()

    def save_failure_evidence(self) -> list[Path]:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "jupyterlab-failure.png"
        log = ARTIFACTS / "jupyterlab.console.log"
        server_log = ARTIFACTS / "jupyterlab.server.log"
        with contextlib.suppress(Exception):
            self.page.screenshot(path=str(shot))
        log.write_text("\n".join(self.console) + "\n")
        shutil.copyfile(self.lab.log, server_log)
        return [shot, log, server_log]


@pytest.fixture
def lab_page(browser, lab):
    page = LabPage(browser, lab)
    yield page
    page.context.close()


@pytest.mark.browser
def test_chapter_runs_in_jupyterlab_and_shows_its_bound_numbers(lab_page, request):
    notebook = json.loads(lab_page.lab.notebook.read_text())
    index, source = first_bound_cell(notebook)
    try:
        _check_chapter(lab_page, index, source)
    except BaseException:
        saved = lab_page.save_failure_evidence()
        request.node.user_properties.append(("evidence", [str(p) for p in saved]))
        print("failure evidence:", *saved, sep="\n  ")
        raise


def _check_chapter(lab_page: LabPage, index: int, source: str) -> None:
    lab_page.open()
    config = json.loads(lab_page.page.locator("#jupyter-config-data").text_content())
    assert config.get("news", {}).get("disabled") is True, "JupyterLab would fetch news"
    _check_solutions_folded(lab_page)

    start = time.monotonic()
    model = lab_page.run_all()
    seconds = time.monotonic() - start
    print(f"{model['path']}: Run All took {seconds:.1f} s")
    errors = [f"cell {i}: {e}" for i, cell in enumerate(model["cells"]) for e in cell["errors"]]
    assert not errors, "error outputs:\n" + "\n".join(errors)
    assert model["runAll"] == {"ok": True}, f"Run All reported {model['runAll']}"
    assert model["kernel"] == "idle"
    unrun = [i for i, cell in enumerate(model["cells"])
             if cell["type"] == "code" and cell["count"] is None]
    assert not unrun, f"code cells without an execution count: {unrun}"
    assert model["cells"][index]["source"] == source, "the page shows another cell"
    assert model["glued"], "the kernel glued nothing (is myst-nb installed in its environment?)"

    rendered, output = lab_page.rendered_cell(index)
    ARTIFACTS.mkdir(exist_ok=True)
    output.screenshot(path=str(SHOT))
    print(f"screenshot: {SHOT}")
    problems = binding_problems(source, model["glued"], rendered)
    assert not problems, "\n".join(problems) + f"\nrendered text:\n{rendered}"

    # A planted wrong number, typed into the same cell, must be reported.
    name, spec = split_key(BINDING.search(source)["key"])
    text = glue_text(model["glued"][name], spec)
    tampered, wrong = plant_wrong_number(source, text)
    rendered_tampered, _ = lab_page.rendered_cell(index, tampered, shows=wrong)
    planted = binding_problems(tampered, model["glued"], rendered_tampered)
    assert any(p.startswith(f"{name}: the prose says {wrong!r}") for p in planted), planted
    assert f"{name}: the rendered cell does not show {text!r}" in planted, planted
    print(f"planted {wrong!r} for {text!r}: reported as {planted}")

    assert not lab_page.external, f"requests to other hosts: {lab_page.external}"


def _check_solutions_folded(lab_page: LabPage) -> None:
    """The notebook opens with every solution folded (its cells hidden); one click on the
    first one's "cells hidden" button shows its cells and only those."""
    solutions = lab_page.solutions()
    assert solutions, "the chapter has no '### Solution N' heading"
    shown = [s["index"] for s in solutions if not s["folded"] or not all(s["hidden"])]
    assert not shown, f"solutions on screen when the notebook opens (heading cells {shown})"
    first = solutions[0]
    lab_page.click_fold_button(first["index"])
    lab_page.page.wait_for_function(
        "i => !window.jupyterapp.shell.currentWidget.content.widgets[i].headingCollapsed",
        arg=first["index"], timeout=10_000)
    after = lab_page.solutions()
    assert not any(after[0]["hidden"]), f"one click left cells of solution 1 hidden: {after[0]}"
    assert all(s["folded"] and all(s["hidden"]) for s in after[1:]), "other solutions opened"
    print(f"solution 1 opened with one click: {len(after[0]['hidden'])} cells shown")


# ------------------------------------------------ every chapter's live explorer, in JupyterLab

# One notebook that builds each chapter's live explorer on small inputs (untrained models:
# the test is about the widgets and the redraw, not the numbers), run in JupyterLab.
EXPLORER_SETUP = """\
import torch
from aiayn import Transformer
from aiayn.experiments.heads import TinyEncoder
from aiayn.learning.data import date_tokenizer
from aiayn.learning.recipes import date_config
torch.manual_seed(0)
x = torch.randn(3, 8)
tokenizer = date_tokenizer()
date_model = Transformer(date_config(tokenizer, n_layers=1, d_model=16, n_heads=2, d_ff=32)).eval()
encoder = TinyEncoder(16, 16, d_model=16, n_heads=2, n_layers=1, d_ff=16, max_len=8)
head_tokens = torch.randint(0, 16, (2, 6))"""
EXPLORERS = {  # chapter: (the cell, the control moved: a CSS selector in its output, action)
    "01": ("from aiayn.figures.recurrence import gradient_decay_explorer\n"
           "gradient_decay_explorer(d_model=8, twin=False)", ".noUi-handle", "End"),
    "02": ("from aiayn.figures.attention import attention_explorer\n"
           "attention_explorer(['it', 'was', 'tired'], x, x, x, twin=False)", "select", 2),
    "03": ("from aiayn.figures.variance import scaling_explorer\n"
           "scaling_explorer(n_keys=4, twin=False)", ".noUi-handle", "End"),
    "04": ("from aiayn.figures.heads import head_explorer\n"
           "head_explorer({'tiny': encoder}, head_tokens, [list('abcdef'), list('uvwxyz')],"
           " twin=False)", ".noUi-handle", "End"),
    "05": ("from aiayn.figures.positions import positional_explorer\n"
           "positional_explorer(d_model=16, n_positions=20, twin=False)", ".noUi-handle", "End"),
    "06": ("from aiayn.figures.encoder_decoder import encoder_decoder_explorer\n"
           "encoder_decoder_explorer(date_model, tokenizer, 'Nov 29, 2026', twin=False)",
           "select", 0),
    "07": ("from aiayn.figures.translation import date_explorer\n"
           "date_explorer(date_model, tokenizer, 'Nov 29, 2026', twin=False)", "input[type=text]",
           "2049.12.31"),
    "08": ("from aiayn.figures.costs import complexity_explorer\n"
           "complexity_explorer(d=64, twin=False)", ".noUi-handle", "End"),
    "10": ("from aiayn.figures.trained_heads import trained_attention_explorer\n"
           "from aiayn.pretrained import load_minilm, load_tokenizer\n"
           "trained_attention_explorer(load_minilm(), load_tokenizer(), ['Cats sleep.'],"
           " twin=False)", ".noUi-handle", "End"),
}

# The rendered output of one code cell: its images' sources and its text.
OUTPUT_OF = """
index => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  const area = cell.node.querySelector('.jp-OutputArea');
  const images = Array.from(area.querySelectorAll('img'));
  return {images: images.map(i => i.src), alts: images.map(i => i.alt), text: area.innerText};
}
"""


# Whether an element has the keyboard focus and draws a ring of at least 2 px around it.
FOCUS_RING = """el => document.activeElement === el && el.matches(':focus-visible')
  && getComputedStyle(el).outlineStyle !== 'none' && parseFloat(getComputedStyle(el).outlineWidth) >= 2"""


def _explorer_notebook(path: Path) -> list[str]:
    cells = [{"cell_type": "code", "metadata": {}, "source": EXPLORER_SETUP, "outputs": [],
              "execution_count": None}]
    for code, _, _ in EXPLORERS.values():
        cells.append({"cell_type": "code", "metadata": {}, "source": code, "outputs": [],
                      "execution_count": None})
    notebook = json.loads(CHAPTER.read_text())
    notebook["cells"] = cells
    path.write_text(json.dumps(notebook, indent=1))
    return list(EXPLORERS)


@pytest.fixture(scope="module")
def explorer_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("explorers")
    profile = tmp_path_factory.mktemp("jupyter-profile-explorers")
    copy = root / "explorers.ipynb"
    _explorer_notebook(copy)
    with _serving(root, profile, copy) as server:
        yield server


@pytest.mark.browser
def test_every_live_explorer_redraws_in_jupyterlab(browser, explorer_lab, request):
    """Run all cells; in each explorer move one control; its figure must be redrawn (a new
    image) with a new text alternative (its caption, as alt text and on screen), with no error
    output and no request to another host. A slider moved by the keyboard shows a focus ring,
    and axe-core finds no serious or critical violation in the explorers' outputs (a slider
    named by its label, among others)."""
    page = LabPage(browser, explorer_lab)
    try:
        page.open()
        model = page.run_all()
        errors = [f"cell {i}: {e}" for i, c in enumerate(model["cells"]) for e in c["errors"]]
        assert not errors, "error outputs:\n" + "\n".join(errors)
        problems = []
        for index, (chapter, (_, selector, action)) in enumerate(EXPLORERS.items(), start=1):
            before = page.page.evaluate(OUTPUT_OF, index)
            cell = page.page.locator(".jp-Notebook .jp-Cell").nth(index)
            cell.scroll_into_view_if_needed()
            control = cell.locator(f".jp-OutputArea {selector}").first
            if selector == "select":
                options = control.locator("option").count()
                control.select_option(index=action if action < options else options - 1)
            elif selector.startswith("input"):
                control.fill(action)
                control.press("Enter")
            else:
                control.focus()
                control.press(action)
                # moved by the keyboard: the handle has the focus, and shows it
                ring = control.evaluate(FOCUS_RING)
                if not ring:
                    problems.append(f"chapter {chapter}: the focused {selector} shows no ring")
            try:
                page.page.wait_for_function(
                    "([index, before]) => { const o = (" + OUTPUT_OF + ")(index);"
                    " return o.images.length > 0 && o.images.join() !== before; }",
                    arg=[index, ",".join(before["images"])], timeout=60_000, polling=250)
            except Exception:
                after = page.page.evaluate(OUTPUT_OF, index)
                problems.append(f"chapter {chapter}: no new figure after moving {selector} "
                                f"({len(after['images'])} images; text {after['text'][:200]!r})")
            after = page.page.evaluate(OUTPUT_OF, index)
            if "Traceback" in after["text"]:
                problems.append(f"chapter {chapter}: a traceback in the explorer's output")
            # The view's text alternative: the caption of this setting, as alt text and on screen.
            for alt in after["alts"]:
                if not alt.strip() or alt not in after["text"]:
                    problems.append(f"chapter {chapter}: a view whose alt text {alt!r} is empty "
                                    "or not its caption")
            if after["alts"] == before["alts"]:
                problems.append(f"chapter {chapter}: the view's text alternative did not change "
                                f"after moving {selector}: {after['alts']}")
        # Every control and view of the live explorers, for a screen reader (axe-core, as on
        # the HTML pages): a name for each control, a text alternative for each view.
        violations = accessibility_violations(page.page, ".jp-Notebook .jp-OutputArea")
        problems += [f"accessibility: {p}" for p in blocking_problems(violations)]
        assert not problems, "\n".join(problems)
        assert not page.external, f"requests to other hosts: {page.external}"
    except BaseException:
        saved = page.save_failure_evidence()
        request.node.user_properties.append(("evidence", [str(p) for p in saved]))
        raise
    finally:
        page.context.close()
