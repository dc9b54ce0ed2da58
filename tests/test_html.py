"""The built HTML book, opened page by page in a real browser (headless Chromium).

Reuses ``_build/html`` when it is newer than every source of the book, and builds
it otherwise. ``make test`` builds the book first, then runs these tests
(``pytest -m browser``). Every page listed in ``_toc.yml`` must:

- request nothing from a host other than the local server (the book works offline);
- have no failed request, no HTTP error, no console error, no JavaScript exception;
- render its math with MathJax (``mjx-container``), with no raw ``$$`` or ``\\(`` left;
- show every image (``naturalWidth > 0``) and give every image alt text or a caption;
- have one ``h1`` and headings that never skip a level;
- show no widget control: the HTML has no kernel, so a slider would move without
  effect; the explorers are replaced by a note and static figures.

Chapter pages must also launch the right notebook in Colab and offer the notebook
for download. On failure a screenshot and the console log are saved in
``test-artifacts/`` and their paths are printed.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
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
  // Widget views (rendered or still waiting for the widget manager) and sliders.
  const controls = article.querySelectorAll(
    '.jupyter-widgets, .widget-box, input[type=range], ' +
    'script[type="application/vnd.jupyter.widget-view+json"]');
  return {
    mathSource: document.querySelectorAll('.math, div.math, span.math').length,
    mathRendered: document.querySelectorAll('mjx-container').length,
    text: clone.innerText,
    images: Array.from(article.querySelectorAll('img')).map(img => ({
      src: img.currentSrc || img.src,
      ok: img.complete && img.naturalWidth > 0,
      alt: (img.getAttribute('alt') || '').trim(),
      caption: !!(img.closest('figure') && img.closest('figure').querySelector('figcaption')),
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
               *ROOT.glob("book/*"), *ROOT.glob("src/aiayn/*.py")]
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


@pytest.fixture
def visit(browser, site):
    contexts = []

    def open_page(page_path: str) -> PageVisit:
        page = PageVisit(browser, site, page_path)
        contexts.append(page.page.context)
        return page

    yield open_page
    for context in contexts:
        context.close()


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


@pytest.mark.parametrize("page_path", PAGES)
def test_page_is_offline_complete_and_clean(visit, page_path):
    page = visit(page_path)
    page.fail_if(page.problems + _content_problems(page.info))


@pytest.mark.parametrize("chapter", CHAPTERS)
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
    for info in pkgutil.iter_modules(aiayn.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"aiayn.{info.name}")
        missing += [f"aiayn.{info.name}.{name}" for name in getattr(module, "__all__", [])
                    if f'id="aiayn.{info.name}.{name}"' not in html]
    assert not missing, f"not on the API page: {missing}"

