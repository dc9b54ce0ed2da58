"""Sphinx extension: accessibility fixes to the HTML that upstream packages write.

Run on every built page after the build (``build-finished``), each rewrite a small, exact
substitution, each for a rule of axe-core's WCAG 2.1 A/AA audit that the page failed
(``tests/test_html.py::test_page_passes_the_accessibility_audit`` runs the audit):

- **label-content-name-mismatch** (serious). A control's accessible name must contain the text it
  shows, or speech users cannot name it. MyST-NB's folded cells have
  ``<summary aria-label="Toggle hidden content">`` around the visible "Show code cell content";
  pydata-sphinx-theme's search field button has ``aria-label="Search"`` around the visible
  "Search Ctrl+K". Both lose the ``aria-label``, so the visible text is the name. (Upstream: set
  no ``aria-label`` on a control that has visible text.) The theme's colour-mode button, named
  "Color mode", shows an icon per mode whose ``title`` Font Awesome turns into the text of an
  ``<svg role="img">`` ("Light", "Dark"): the icons lose their titles and so become decorative
  (``aria-hidden``), as icons inside a named button should. (Upstream: no ``title`` on them.)
- **aria-deprecated-role** (minor) and **aria-required-children** (critical). docutils writes a
  bibliography as ``<div role="list">`` whose entries carry ``role="doc-biblioentry"``,
  deprecated in DPUB-ARIA 1.1, so the list has no list items. The entries become
  ``role="listitem"``. (Upstream: docutils' HTML5 writer, which sphinxcontrib-bibtex uses.)
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx

# (what, pattern, replacement); each pattern matches only the markup it is meant for.
REWRITES: list[tuple[str, re.Pattern, str]] = [
    ("folded cell's summary", re.compile(r'<summary aria-label="Toggle hidden content">'),
     "<summary>"),
    ("search field button",
     re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="Search"'),
     r"\1"),
    ("colour-mode icon",
     re.compile(r'(<i class="theme-switch [^"]*"\s+data-mode="\w+")\s+title="[^"]*"'), r"\1"),
    ("bibliography entry", re.compile(r'\brole="doc-biblioentry"'), 'role="listitem"'),
]


def make_accessible(html: str) -> str:
    """``html`` with every rewrite of :data:`REWRITES` applied."""
    for _, pattern, replacement in REWRITES:
        html = pattern.sub(replacement, html)
    return html


def _rewrite_pages(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = make_accessible(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", _rewrite_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
