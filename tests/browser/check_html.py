"""Open every page of the built book in headless Chromium and check it.

Usage: python tests/browser/check_html.py [_build/html]

The built HTML is served on a localhost port; each page is loaded in Debian's
Chromium driven by Playwright, and must:

- request nothing from a host other than the local server (the book works offline);
- have no failed request and no HTTP error (404 and the like);
- log no console error and raise no uncaught JavaScript exception;
- render its math: a page with math has MathJax output (``mjx-container``) and no
  raw ``$$``, ``\\(`` or ``\\[`` left in its visible text;
- show every image (``naturalWidth > 0``).

A screenshot of each page goes to test-artifacts/screenshots/. The script exits
with status 1 and lists the problems (and the screenshots) when a check fails.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
# Pages not to check (none for now; _modules/, _static/ etc. are skipped by their "_").
SKIP: set[str] = set()

# Runs in the page once MathJax has finished: what a reader would see.
PAGE_PROBE = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const main = document.querySelector('main') || document.body;
  const clone = main.cloneNode(true);
  // Source listings may show TeX on purpose.
  clone.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
       .forEach(e => e.remove());
  const images = Array.from(document.images).map(img => ({
    src: img.currentSrc || img.src,
    ok: img.complete && img.naturalWidth > 0,
  }));
  return {
    mathSource: document.querySelectorAll('.math, div.math, span.math').length,
    mathRendered: document.querySelectorAll('mjx-container').length,
    mathJaxLoaded: !!(window.MathJax && MathJax.version),
    text: clone.innerText,
    images: images,
  };
}
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def book_pages(html_dir: Path) -> list[Path]:
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir)
        if rel.parts[0].startswith("_") or rel.name in SKIP:
            continue
        pages.append(rel)
    return pages


def check_page(browser, base: str, rel: Path) -> tuple[list[str], Path]:
    problems: list[str] = []
    local = urlsplit(base).netloc
    # A fresh context per page: every page is checked as a first visit
    # (empty localStorage and cache), as a reader arriving from a search engine.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()

    def on_request(request):
        url = urlsplit(request.url)
        if url.scheme in ("data", "blob", "about"):
            return
        if url.netloc != local:
            problems.append(f"external request: {request.url}")

    def on_response(response):
        if response.status >= 400:
            problems.append(f"HTTP {response.status}: {response.url}")

    def on_failed(request):
        # External requests are already reported (and blocked below).
        if urlsplit(request.url).netloc == local:
            problems.append(f"failed request: {request.url} ({request.failure})")

    def on_console(message):
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    page.on("request", on_request)
    page.on("response", on_response)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"JavaScript exception: {exc}"))
    # Nothing may leave the machine, even if the check would catch it anyway.
    page.route(
        lambda url: urlsplit(url).netloc not in (local, ""),
        lambda route: route.abort(),
    )

    url = f"{base}/{rel.as_posix()}"
    page.goto(url, wait_until="load", timeout=60_000)
    try:
        page.wait_for_load_state("networkidle", timeout=15_000)
    except Exception:  # a page that keeps polling is reported by the checks below
        pass
    info = page.evaluate(PAGE_PROBE)

    if info["mathSource"]:
        if not info["mathJaxLoaded"]:
            problems.append("page has math but MathJax did not load")
        elif info["mathRendered"] == 0:
            problems.append(f"{info['mathSource']} math elements but no mjx-container")
    for raw in ("$$", "\\(", "\\["):
        if raw in info["text"]:
            problems.append(f"raw math delimiter {raw!r} left in the visible text")
    for image in info["images"]:
        if not image["ok"]:
            problems.append(f"image not shown: {image['src']}")

    shot = ARTIFACTS / (rel.as_posix().replace("/", "__").removesuffix(".html") + ".png")
    page.screenshot(path=str(shot), full_page=True)
    context.close()
    return problems, shot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html_dir", nargs="?", default=str(ROOT / "_build" / "html"))
    args = parser.parse_args(argv)
    html_dir = Path(args.html_dir).resolve()
    if not (html_dir / "index.html").exists():
        print(f"check_html: no built book in {html_dir}; run `make book` first", file=sys.stderr)
        return 2

    pages = book_pages(html_dir)
    if not pages:
        print(f"check_html: no pages in {html_dir}", file=sys.stderr)
        return 2
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    server, base = serve(html_dir)
    failures = 0
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            for rel in pages:
                problems, shot = check_page(browser, base, rel)
                status = "ok" if not problems else "FAIL"
                print(f"{status:4}  {rel.as_posix()}")
                if problems:
                    failures += 1
                    for problem in dict.fromkeys(problems):
                        print(f"      - {problem}")
                    print(f"      screenshot: {shot}")
            browser.close()
    finally:
        server.shutdown()

    print(
        f"check_html: {len(pages) - failures}/{len(pages)} pages passed "
        f"(screenshots in {ARTIFACTS})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
