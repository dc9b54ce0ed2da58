"""``_ext/accessible_html.py``: each rewrite changes the upstream markup it is for, and nothing
else (the audit of the built pages is ``tests/test_html.py::test_page_passes_the_accessibility_audit``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))

from accessible_html import make_accessible  # noqa: E402

UPSTREAM = {  # what the packages write -> what the book serves
    '<summary aria-label="Toggle hidden content">\n<p class="collapsed admonition-title">':
        '<summary>\n<p class="collapsed admonition-title">',
    '<button class="btn search-button-field search-button__button pst-js-only" title="Search" '
    'aria-label="Search" data-bs-placement="bottom">':
        '<button class="btn search-button-field search-button__button pst-js-only" title="Search" '
        'data-bs-placement="bottom">',
    '<i class="theme-switch fa-solid fa-moon               fa-lg" data-mode="dark"  title="Dark"></i>':
        '<i class="theme-switch fa-solid fa-moon               fa-lg" data-mode="dark"></i>',
    '<div role="list" class="citation-list">\n<div class="citation" id="id1" role="doc-biblioentry">':
        '<div role="list" class="citation-list">\n<div class="citation" id="id1" role="listitem">',
}

UNTOUCHED = [
    # the icon-only search button has no visible text: its aria-label is its name
    '<button class="btn btn-sm pst-navbar-icon search-button search-button__button pst-js-only" '
    'title="Search" aria-label="Search">',
    '<button class="btn btn-sm nav-link pst-navbar-icon theme-switch-button pst-js-only" '
    'aria-label="Color mode" data-bs-title="Color mode">',
    '<summary aria-label="Show the answer">',
    '<i class="fa-solid fa-list" title="Contents"></i>',
]


def test_each_rewrite_fixes_its_upstream_markup():
    for upstream, served in UPSTREAM.items():
        assert make_accessible(upstream) == served


def test_other_markup_is_left_alone():
    for html in UNTOUCHED:
        assert make_accessible(html) == html
