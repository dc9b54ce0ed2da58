"""The built HTML book, opened page by page in a real browser (headless Chromium).

Reuses ``_build/html`` when it is newer than every source of the book, and builds
it otherwise. ``make test`` builds the book first, then runs these tests
(``pytest -m browser``). Every page listed in ``_toc.yml`` must:

- request nothing from a host other than the local server (the book works offline);
- have no failed request, no HTTP error, no console error, no JavaScript exception;
- render its math with MathJax (``mjx-container``), with no raw ``$$`` or ``\\(`` left;
- show every image (``naturalWidth > 0``) and give every image alt text or a caption;
- have one ``h1`` and headings that never skip a level;
- pass axe-core's audit of WCAG 2.1 A and AA with no serious or critical violation;
- show no live widget control: the HTML has no kernel, so a control of a live explorer
  would move without effect. The explorers shown are their precomputed twins
  (``aiayn.figures.views``), whose controls switch views in the browser; each one's
  controls are moved and checked below (``explorer_problems``).

Chapter pages must also launch the right notebook in Colab and offer the notebook
for download. On failure a screenshot and the console log are saved in
``test-artifacts/`` and their paths are printed.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "test-artifacts"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
COLAB = "https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"
# axe-core, vendored from npm by scripts/vendor_assets.sh (no page of the book loads it).
AXE = ROOT / "_assets" / "vendor" / "axe" / "axe.min.js"


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


PAGES = _toc_files() + ["genindex", "search"]
CHAPTERS = [f for f in PAGES if (ROOT / f"{f}.ipynb").exists()]

# Runs in the page once MathJax has finished: what a reader sees.
PROBE = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const main = document.querySelector('main') || document.body;
  const clone = main.cloneNode(true);
  // Code listings may show TeX on purpose.
  clone.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
       .forEach(e => e.remove());
  const article = document.querySelector('article') || main;
  // Widget views (rendered or still waiting for the widget manager) and sliders, except
  // the precomputed explorers (and the tags that render them), which work without a kernel.
  const twin = e => e.closest('.aiayn-static-explorer') ||
    (e.tagName === 'SCRIPT' && e.parentElement &&
     e.parentElement.querySelector('.aiayn-static-explorer'));
  const controls = Array.from(article.querySelectorAll(
    '.jupyter-widgets, .widget-box, input[type=range], ' +
    'script[type="application/vnd.jupyter.widget-view+json"]')).filter(e => !twin(e));
  return {
    mathSource: document.querySelectorAll('.math, div.math, span.math').length,
    mathRendered: document.querySelectorAll('mjx-container').length,
    text: clone.innerText,
    images: Array.from(article.querySelectorAll('img')).map(img => ({
      src: img.currentSrc || img.src,
      ok: img.complete && img.naturalWidth > 0,
      alt: (img.getAttribute('alt') || '').trim(),
      // a figure's caption, or, for a precomputed explorer's view, the line under it
      caption: !!(img.closest('figure') && img.closest('figure').querySelector('figcaption')) ||
        !!(img.parentElement && img.parentElement.closest('.widget-vbox') &&
           img.parentElement.closest('.widget-vbox').querySelector('.aiayn-view')),
    })),
    headings: Array.from(article.querySelectorAll('h1, h2, h3, h4, h5, h6'))
      .map(h => [Number(h.tagName[1]), h.innerText.trim()]),
    controls: Array.from(controls).map(c => c.outerHTML.slice(0, 80)),
    colab: Array.from(document.querySelectorAll('a[href*="colab.research.google.com"]'))
      .map(a => a.getAttribute('href')),
    downloads: Array.from(document.querySelectorAll('a[href$=".ipynb"]'))
      .map(a => a.href),
  };
}
"""


def _sources_newer_than_build() -> bool:
    built = HTML / "index.html"
    if not built.exists():
        return True
    sources = [ROOT / "_config.yml", ROOT / "_toc.yml", ROOT / "references.bib",
               *ROOT.glob("book/*"), *ROOT.glob("src/aiayn/**/*.py"), *ROOT.glob("_ext/*.py"),
               *ROOT.glob("_assets/*.*")]
    return max(p.stat().st_mtime for p in sources) > built.stat().st_mtime


@pytest.fixture(scope="module")
def site():
    """The base URL of the built book, served on localhost."""
    if _sources_newer_than_build():
        jupyter_book = Path(sys.executable).parent / "jupyter-book"
        subprocess.run([jupyter_book, "build", ".", "--all", "-W", "-n", "--keep-going"],
                       check=True, cwd=ROOT)
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


class PageVisit:
    """One page opened as a first visit, with everything the browser reported."""

    def __init__(self, browser, site: str, page_path: str):
        self.problems: list[str] = []
        self.console: list[str] = []
        self.local = urlsplit(site).netloc
        self.name = page_path.replace("/", "__")
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = page = context.new_page()
        page.on("request", self._on_request)
        page.on("response", self._on_response)
        page.on("requestfailed", self._on_failed)
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.problems.append(f"JavaScript exception: {exc}"))
        # Nothing may leave the machine, even when the checks would catch it anyway.
        page.route(lambda url: urlsplit(url).netloc not in (self.local, ""),
                   lambda route: route.abort())
        page.goto(f"{site}/{page_path}.html", wait_until="load", timeout=60_000)
        try:
            page.wait_for_load_state("networkidle", timeout=15_000)
        except Exception:  # a page that keeps polling is caught by the checks
            pass
        self.info = page.evaluate(PROBE)

    def _on_request(self, request):
        url = urlsplit(request.url)
        if url.scheme not in ("data", "blob", "about") and url.netloc != self.local:
            self.problems.append(f"external request: {request.url}")

    def _on_response(self, response):
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def _on_failed(self, request):
        if urlsplit(request.url).netloc == self.local:  # external ones are reported above
            self.problems.append(f"failed request: {request.url} ({request.failure})")

    def _on_console(self, message):
        self.console.append(f"{message.type}: {message.text}")
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def fail_if(self, problems: list[str]) -> None:
        """Fail with the problems, after saving a screenshot and the console log."""
        if not problems:
            return
        ARTIFACTS.mkdir(exist_ok=True)
        shot, log = ARTIFACTS / f"{self.name}.png", ARTIFACTS / f"{self.name}.console.log"
        self.page.screenshot(path=str(shot), full_page=True)
        log.write_text("\n".join(self.console) + "\n")
        listed = "\n".join(f"  - {p}" for p in dict.fromkeys(problems))
        pytest.fail(f"{self.name}:\n{listed}\nscreenshot: {shot}\nconsole log: {log}")


@pytest.fixture(scope="module")
def _opened(browser, site):
    pages: dict[str, PageVisit] = {}
    yield pages
    for page in pages.values():
        page.page.context.close()


@pytest.fixture
def visit(_opened, browser, site):
    """Open a page, once per worker: the tests of one page are one xdist group (``_grouped``),
    so one worker runs them all, in file order, on one visit (the clean-page check first)."""

    def open_page(page_path: str) -> PageVisit:
        if page_path not in _opened:
            _opened[page_path] = PageVisit(browser, site, page_path)
        return _opened[page_path]

    return open_page


def _grouped(pages: list[str]) -> list:
    """One xdist group per page (``--dist loadgroup``): its tests share one visit."""
    return [pytest.param(page, marks=pytest.mark.xdist_group(page)) for page in pages]


def _content_problems(info: dict) -> list[str]:
    problems = []
    if info["mathSource"] and info["mathRendered"] == 0:
        problems.append(f"{info['mathSource']} math elements but MathJax rendered none")
    for raw in ("$$", "\\(", "\\["):
        if raw in info["text"]:
            problems.append(f"raw math delimiter {raw!r} left in the text")
    # The notebooks' CommonMark forms, and MyST that was not converted, must not show.
    for raw in ("{glue", "{ref}", "{cite}", "{doc}", "<!--", "glue:", ":::", "<a id="):
        if raw in info["text"]:
            problems.append(f"raw markup {raw!r} shown in the text")
    for image in info["images"]:
        if not image["ok"]:
            problems.append(f"image not shown: {image['src']}")
        if not (image["alt"] or image["caption"]):
            problems.append(f"image without alt text or caption: {image['src']}")
    levels = [level for level, _ in info["headings"]]
    if levels.count(1) != 1:
        problems.append(f"{levels.count(1)} h1 headings, expected 1")
    for (before, _), (level, text) in itertools.pairwise(info["headings"]):
        if level > before + 1:
            problems.append(f"heading {text!r} (h{level}) skips a level after h{before}")
    for control in info["controls"]:
        problems.append(f"dead widget control in the HTML: {control}")
    return problems


@pytest.mark.parametrize("page_path", _grouped(PAGES))
def test_page_is_offline_complete_and_clean(visit, page_path):
    page = visit(page_path)
    page.fail_if(page.problems + _content_problems(page.info))


# Where RequireJS puts each module of the widget bundle, which loads its icon fonts from beside
# that URL: it must be the vendored folder (the fonts are there), not the page's own folder.
MODULE_URLS = """() => ["base", "controls", "base7", "controls7", "html-manager"].map(
    name => new URL(require.toUrl("@jupyter-widgets/" + name), location.href).pathname)"""


@pytest.mark.xdist_group("book/02_scaled_dot_product_attention")
def test_the_widget_bundle_finds_its_fonts(visit):
    page = visit("book/02_scaled_dot_product_attention")
    folders = {url.rsplit("/", 1)[0] for url in page.page.evaluate(MODULE_URLS)}
    assert folders == {"/_static/vendor/html-manager"}, folders


@pytest.mark.parametrize("chapter", _grouped(CHAPTERS))
def test_chapter_launches_in_colab_and_downloads(visit, site, chapter):
    page = visit(chapter)
    repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/")
    expected = COLAB.format(repo=repo, branch=CONFIG["repository"]["branch"],
                            path=f"{chapter}.ipynb")
    problems = []
    if expected not in page.info["colab"]:
        problems.append(f"no Colab button to {expected}; found {page.info['colab']}")
    downloads = [u for u in page.info["downloads"] if urlsplit(u).netloc == page.local]
    if not downloads:
        problems.append("no notebook download link")
    for url in downloads:
        with urllib.request.urlopen(url) as response:  # noqa: S310 - localhost only
            notebook = json.loads(response.read())
        if notebook.get("nbformat") != 4 or not notebook.get("cells"):
            problems.append(f"download {url} is not a notebook")
    page.fail_if(problems)


def test_api_page_documents_every_public_name(site):
    """Each name in a module's ``__all__`` has its own entry (an anchor) on the API page."""
    import importlib
    import pkgutil

    import aiayn

    html = (HTML / "book" / "api.html").read_text()
    missing = []
    for info in pkgutil.walk_packages(aiayn.__path__, prefix="aiayn."):
        if info.ispkg or info.name.rsplit(".", 1)[1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        missing += [f"{info.name}.{name}" for name in getattr(module, "__all__", [])
                    if f'id="{info.name}.{name}"' not in html]
    assert not missing, f"not on the API page: {missing}"



# ------------------------------------------------------- the explorers, without a kernel

EXPLORER_CHAPTERS = [c for c in CHAPTERS
                     if c.split("/")[-1][:2] in {f"0{i}" for i in range(1, 9)} | {"10"}]
# The weight of a chapter page (its HTML, which embeds every precomputed view); measured
# at 0.4 to 2.3 MB when the twins were added.
MAX_PAGE_BYTES = 4_000_000

VISIBLE_VIEW = """
ex => {
  const shown = Array.from(ex.querySelectorAll('.aiayn-view'))
    .filter(v => v.offsetParent !== null);
  return shown.map(v => Object.assign({text: v.innerText}, v.dataset));
}
"""
ALL_SETTINGS = "ex => Array.from(ex.querySelectorAll('.aiayn-view')).map(v => v.dataset.setting)"


def _n_options(control) -> int:
    """How many options a control of a precomputed explorer offers, read from its DOM (the
    views of a Stack are not all in the page, so they cannot tell)."""
    if control.locator("select").count():
        return control.locator("select option").count()
    if control.locator("button").count():
        return control.locator("button").count()
    return int(float(control.locator(".noUi-handle").get_attribute("aria-valuemax"))) + 1


def _move(control, where: str) -> None:
    """Move one control of a precomputed explorer to its first or last option."""
    if control.locator("select").count():
        select = control.locator("select")
        n = select.locator("option").count()
        select.select_option(index=0 if where == "first" else n - 1)
    elif control.locator("button").count():
        buttons = control.locator("button")
        buttons.nth(0 if where == "first" else buttons.count() - 1).click()
    else:  # a selection slider: its handle takes the keyboard
        handle = control.locator(".noUi-handle")
        handle.focus()
        handle.press("Home" if where == "first" else "End")


def _package_problems(chapter: str, view: dict) -> list[str]:
    """What a view shows, at the setting reached, against the package's own computation."""
    import math
    import re

    import torch

    name = chapter.split("/")[-1]
    if name.startswith("03_") and "std" in view:
        from aiayn.experiments.variance import attention_score_rows

        d_k = int(re.search(r"d_k = (\d+)", view["text"])[1])
        raw = attention_score_rows(d_k, 1000, 16, torch.Generator().manual_seed(0), scaled=False)
        scores = raw / math.sqrt(d_k) if ", scaled" in view["text"] else raw
        expected = float(scores.flatten().std(unbiased=False))
        if abs(float(view["std"]) - expected) > 1e-3:
            return [f"{name}: the view shows std {view['std']}, the package gives {expected:.4f}"]
    if name.startswith("05_") and "pe" in view:
        from aiayn import sinusoidal_encoding

        p, i = map(int, re.search(r"PE\[(\d+), (\d+)\]", view["text"]).groups())
        expected = float(sinusoidal_encoding(128, 128)[p, i])
        if abs(float(view["pe"]) - expected) > 1e-5:
            return [f"{name}: the view shows PE[{p}, {i}] = {view['pe']}, the package {expected}"]
    if name.startswith("10_") and "top" in view:
        # "layer L, head H: tok→target, ...": one top target per token, each a token's index
        pairs = view["text"].split(": ", 1)[1].split(", ")
        top = [int(j) for j in view["top"].split(",")]
        if len(top) != len(pairs) or max(top) >= len(pairs) \
                or f"layer {view['layer']}, head {view['head']}:" not in view["text"]:
            return [f"{name}: the view's top targets {top} do not fit its caption {view['text']!r}"]
    if name.startswith("08_") and "crossover" in view:
        from aiayn.experiments.costs import crossover_length
        from aiayn.figures.costs import complexity_caption

        d = int(re.search(r"d = (\d+)", view["text"])[1])
        if float(view["crossover"]) != crossover_length(d):
            return [f"{name}: crossover {view['crossover']} at d = {d}, the package "
                    f"{crossover_length(d)}"]
        # the whole caption, kernel and window included, is the package's for this setting
        k, r, n_max = (int(re.search(pattern, view["text"])[1])
                       for pattern in (r"k = (\d+)", r"r = (\d+)", r"at n = (\d+), FLOPs"))
        if view["text"] != complexity_caption(d, k, r, n_max)[0]:
            return [f"{name}: the caption {view['text']!r} is not the package's for d = {d}, "
                    f"k = {k}, r = {r}, n = {n_max}"]
    return []


# What a screen reader gets from an explorer (widgets-config.js writes it): the live region's
# text, the alt text of the image on screen, the controls whose name is not their label, and
# whether the control that has the keyboard's focus shows a focus ring.
DESCRIPTION = """ex => {
  const shown = Array.from(ex.querySelectorAll('.aiayn-view')).filter(v => v.offsetParent !== null);
  const live = ex.querySelector(':scope > .aiayn-live');
  // the tests move a slider with the keyboard (a ring), a button with the mouse (none needed)
  const active = document.activeElement;
  const focused = ex.contains(active) && active.matches('[role=slider]') ? active : null;
  return {
    live: live && live.getAttribute('aria-live') === 'polite' ? live.textContent : null,
    alts: shown.map(v => ((v.closest('.widget-vbox') || v.parentElement).querySelector('img') || {}).alt),
    unnamed: Array.from(ex.querySelectorAll('.aiayn-control')).filter(c => {
      const label = ((c.querySelector('.widget-label') || {}).textContent || '').trim();
      const named = Array.from(c.querySelectorAll('[role=slider], select, [role=group]'));
      return !label || !named.length || named.some(n => n.getAttribute('aria-label') !== label);
    }).map(c => c.textContent.trim().slice(0, 40)),
    ring: focused ? getComputedStyle(focused).outlineStyle !== 'none' &&
                    parseFloat(getComputedStyle(focused).outlineWidth) >= 2 : null,
  };
}"""


def _description_problems(explorer, where: str, caption: str) -> list[str]:
    """The view on screen is described (its image's alt text and the live region say its
    caption), every control is named by its label, and a focused control shows a ring."""
    found = explorer.evaluate(DESCRIPTION)
    problems = []
    if found["alts"] != [caption]:
        problems.append(f"{where}: the image's alt text is {found['alts']}, not its caption")
    if found["live"] != caption:
        problems.append(f"{where}: the live region says {found['live']!r}, not {caption!r}")
    if found["unnamed"]:
        problems.append(f"{where}: controls not named by their label: {found['unnamed']}")
    if found["ring"] is False:
        problems.append(f"{where}: the focused control shows no focus ring")
    return problems


def explorer_problems(page, chapter: str = "") -> tuple[list[str], int]:
    """Move every control of every precomputed explorer of ``page`` (a Playwright page) to
    both ends; the problems found and how many moves were checked."""
    problems, checked = [], 0
    explorers = page.locator(".aiayn-static-explorer")
    for e in range(explorers.count()):
        explorer = explorers.nth(e)
        settings = [s.split(",") for s in explorer.evaluate(ALL_SETTINGS)]
        controls = explorer.locator(".aiayn-control")
        if not settings or controls.count() != len(settings[0]):
            problems.append(f"explorer {e}: {controls.count()} controls, views {settings[:1]}")
            continue
        for c in range(controls.count()):
            last = _n_options(controls.nth(c)) - 1
            for where, index in (("last", last), ("first", 0)):
                before = explorer.evaluate(VISIBLE_VIEW)
                _move(controls.nth(c), where)
                page.wait_for_timeout(100)
                after = explorer.evaluate(VISIBLE_VIEW)
                if len(after) != 1:
                    problems.append(f"explorer {e}, control {c} at its {where}: "
                                    f"{len(after)} views shown")
                    continue
                reached = int(after[0]["setting"].split(",")[c])
                if reached != index:
                    problems.append(f"explorer {e}, control {c}: moved to its {where} option "
                                    f"({index}), the view shown is for {reached}")
                if len(before) == 1 and before[0]["setting"].split(",")[c] != str(index) \
                        and after[0]["setting"] == before[0]["setting"]:
                    problems.append(f"explorer {e}, control {c}: the view did not change")
                problems += _package_problems(chapter, after[0])
                problems += _description_problems(explorer, f"explorer {e}, control {c}",
                                                  after[0]["text"])
                checked += 1
    return problems, checked


@pytest.mark.parametrize("chapter", _grouped(EXPLORER_CHAPTERS))
def test_explorers_respond_in_the_static_html(visit, chapter):
    """Every control of every explorer, moved to both ends: the view switches to the one
    precomputed for that setting, in the browser, offline, with no console error, and what
    it shows matches the package; the page stays under its weight."""
    page = visit(chapter)
    problems = []
    weight = (HTML / f"{chapter}.html").stat().st_size
    if weight > MAX_PAGE_BYTES:
        problems.append(f"page weighs {weight:,} bytes, over {MAX_PAGE_BYTES:,}")
    try:
        page.page.wait_for_selector(".aiayn-static-explorer .aiayn-view", timeout=30_000)
    except Exception:
        page.fail_if(["no explorer rendered in the page"])
    found, checked = explorer_problems(page.page, chapter)
    if not checked:
        found.append("no control was moved")
    page.fail_if(page.problems + problems + found)


SOLUTION_CHAPTERS = [c for c in CHAPTERS
                     if re.search(r'"### Solution \d+', (ROOT / f"{c}.ipynb").read_text())]

# Each solution block: is its body shown, and how much of it.
SOLUTION_STATE = """() => Array.from(document.querySelectorAll('div.solution')).map(block => {
    const body = Array.from(block.children).filter(e => !e.classList.contains('admonition-title')
                                                        && e.tagName !== 'BUTTON');
    return {title: block.querySelector('.admonition-title')?.textContent.trim() || '',
            shown: body.some(e => e.offsetParent !== null && e.getBoundingClientRect().height > 0),
            text: body.map(e => e.textContent).join(' ').trim().slice(0, 60)};
})"""


@pytest.mark.parametrize("chapter", _grouped(SOLUTION_CHAPTERS))
def test_solutions_are_folded_until_one_click(visit, chapter):
    """No solution's text is on screen when the page opens; one click on a solution's title
    shows that one solution (and a second click folds it again)."""
    page = visit(chapter)
    n_exercises = page.page.locator("div.exercise").count()
    state = page.page.evaluate(SOLUTION_STATE)
    problems = [f"solution {s['title']!r} is shown before it is asked for: {s['text']!r}"
                for s in state if s["shown"]]
    if len(state) != n_exercises or not state:
        problems.append(f"{n_exercises} exercises but {len(state)} solution blocks")
    first = page.page.locator("div.solution .admonition-title").first
    first.scroll_into_view_if_needed()
    first.click()
    page.page.wait_for_timeout(500)
    opened = page.page.evaluate(SOLUTION_STATE)
    if not opened[0]["shown"] or not opened[0]["text"]:
        problems.append(f"one click on {state[0]['title']!r} did not show its solution")
    if any(s["shown"] for s in opened[1:]):
        problems.append("one click showed more than one solution")
    first.click()  # fold it again: the page stays as it was for the other checks
    page.fail_if(problems)


def test_a_frozen_view_is_reported(browser, site, tmp_path):
    """Planted: a twin whose second control is not linked to its views. The check that
    passes on the chapters must report that moving it changes nothing."""
    w = pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt
    from ipywidgets.embed import embed_data

    from aiayn.figures.views import Control, grid_explorer

    def draw(a, b):
        fig, ax = plt.subplots(figsize=(1, 1))
        ax.plot([0, a], [0, b])
        return fig

    twin = grid_explorer([Control("a", [("1", 1), ("2", 2)], 0, "toggle"),
                          Control("b", [("1", 1), ("2", 2), ("3", 3)], 0)],
                         draw, lambda a, b: (f"{a}, {b}", {}))
    for depth, link in twin.links:
        if depth == 1:
            link.close()  # the planted fault: the slider no longer drives its stacks
    data = embed_data(views=[twin])
    vendor = f"{site}/_static/vendor"
    (tmp_path / "planted.html").write_text(
        f"""<!doctype html><html><head>
<script src="{vendor}/requirejs/require.js"></script>
<script src="{site}/_static/widgets-config.js"></script>
<script src="{vendor}/html-manager/embed-amd.js"></script>
<script type="application/vnd.jupyter.widget-state+json">{json.dumps(data["manager_state"])}</script>
</head><body><script type="application/vnd.jupyter.widget-view+json">{json.dumps(data["view_specs"][0])}</script>
</body></html>""")
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto((tmp_path / "planted.html").as_uri())
        page.wait_for_selector(".aiayn-static-explorer .aiayn-view", timeout=30_000)
        problems, checked = explorer_problems(page)
        # ... and a view that lost its description is reported
        page.evaluate("document.querySelectorAll('.aiayn-static-explorer img')"
                      ".forEach(img => img.removeAttribute('alt'))")
        explorer = page.locator(".aiayn-static-explorer")
        undescribed = _description_problems(explorer, "planted",
                                            explorer.evaluate(VISIBLE_VIEW)[0]["text"])
    finally:
        context.close()
    assert checked == 4
    assert "explorer 0, control 1: the view did not change" in problems
    assert problems and all("control 1" in p for p in problems)  # control 0 still works
    # (the planted page has the widget scripts but not the book's CSS, so no focus ring either)
    assert undescribed == ["planted: the image's alt text is [''], not its caption",
                           "planted: the focused control shows no focus ring"]
    assert w.Stack  # the twin needs ipywidgets 8


# ------------------------------------------------------------------ accessibility

# axe-core's rules for WCAG 2.0 and 2.1, levels A and AA, on the page as it is now.
AXE_RUN = """async (context) => {
  const result = await axe.run(context || document, {
    runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
    resultTypes: ['violations'],
  });
  return result.violations.map(v => ({rule: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 160)}))}));
}"""
BLOCKING = ("serious", "critical")


def accessibility_violations(page, context: str | None = None) -> list[dict]:
    """axe-core's violations on ``page`` (a Playwright page), each with its elements; only in
    the elements that the CSS selector ``context`` matches, if given."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(path=str(AXE))
    return page.evaluate(AXE_RUN, context)


def blocking_problems(violations: list[dict]) -> list[str]:
    """One line per element of a serious or critical violation: rule, impact, element."""
    return [f"{v['rule']} ({v['impact']}): {v['help']}: {node['target']}: {node['html']}"
            for v in violations if v["impact"] in BLOCKING for node in v["nodes"]]


@pytest.mark.parametrize("page_path", _grouped(PAGES))
def test_page_passes_the_accessibility_audit(visit, page_path):
    """No serious or critical violation of WCAG 2.1 A/AA on the page, in light mode (the
    book's default), after the page's other checks (explorers rendered and moved, a solution
    opened and folded again). Minor and moderate violations do not fail; ``-rP`` shows them."""
    page = visit(page_path)
    assert AXE.exists(), f"{AXE} is missing: run scripts/vendor_assets.sh (make assets)"
    violations = accessibility_violations(page.page)
    minor = sorted({f"{v['rule']} x{len(v['nodes'])}" for v in violations
                    if v["impact"] not in BLOCKING})
    if minor:
        print(f"{page_path}: minor or moderate (not failed): {', '.join(minor)}")
    page.fail_if(blocking_problems(violations))


# The theme's dark mode, as its colour-mode button sets it (pydata-sphinx-theme: the mode and
# the theme on <html>); the figures keep their white background in both modes. Transitions are
# switched off while the page is dark: the theme's buttons fade their colours over 0.15 s
# (`transition` in pydata-sphinx-theme's CSS), and an audit that ran during the fade would measure
# a colour in between (once, in a fresh run: the search button's text on one page, which passed
# in every other run). Returns the lightness of the page's background.
DARK = """mode => {
  const root = document.documentElement;
  let still = document.getElementById('aiayn-no-transitions');
  if (mode === 'dark' && !still) {
    still = document.createElement('style');
    still.id = 'aiayn-no-transitions';
    still.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
    document.head.appendChild(still);
  }
  root.dataset.mode = mode;
  root.dataset.theme = mode;
  const [r, g, b] = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number);
  if (mode !== 'dark' && still) still.remove();
  return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
}"""


# Dark mode changes colours only, through the theme's stylesheet, which every page shares; so the
# dark audit runs on one page of each kind of content, not on all (it costs about as much as the
# light audit, about 25 s of the browser stage's wall time for every page): a chapter with code,
# outputs, an explorer and folded solutions; one with wide tables; the errata's verdict tables;
# the bibliography; the API reference; the landing page.
DARK_PAGES = ["book/intro", "book/02_scaled_dot_product_attention", "book/08_complexity",
              "book/errata", "book/references", "book/api"]


def test_the_dark_pages_are_pages_of_the_book():
    assert set(DARK_PAGES) <= set(PAGES)


@pytest.mark.parametrize("page_path", _grouped(DARK_PAGES))
def test_page_passes_the_accessibility_audit_in_dark_mode(visit, page_path):
    """The same audit with the page in the theme's dark mode (colour contrast above all)."""
    page = visit(page_path)
    lightness = page.page.evaluate(DARK, "dark")
    try:
        assert lightness < 0.3, f"{page_path}: the page did not turn dark (lightness {lightness:.2f})"
        violations = accessibility_violations(page.page)
    finally:
        page.page.evaluate(DARK, "light")
    page.fail_if([f"dark mode: {p}" for p in blocking_problems(violations)])


# Planted, one per rule the book's pages once failed (issue 26's audit): an image without alt
# text, a slider without a name, a button whose name hides its text, faint text, and a list
# without list items under a deprecated role.
PLANTED = """<!doctype html><html lang="en"><head><title>planted</title></head><body><main>
<h1>Planted</h1>
<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==">
<div role="slider" tabindex="0" aria-valuemin="0" aria-valuemax="4" aria-valuenow="2"></div>
<button aria-label="Search">Search Ctrl+K</button>
<p style="color: #bbbbbb; background: #ffffff">faint text</p>
<div role="list"><div role="doc-biblioentry">An entry</div></div>
</main></body></html>"""


def test_the_audit_reports_each_planted_violation(browser):
    """The audit that passes on the book's pages names the rule and the element of each
    planted fault."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content(PLANTED)
        problems = blocking_problems(accessibility_violations(page))
    finally:
        context.close()
    for rule, element in [("image-alt", "<img"), ("aria-input-field-name", 'role="slider"'),
                          ("label-content-name-mismatch", "<button"), ("color-contrast", "<p"),
                          ("aria-required-children", 'role="list"')]:
        assert any(p.startswith(f"{rule} (") and element in p for p in problems), (rule, problems)
