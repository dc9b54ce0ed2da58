"""Sphinx extension: keep the built book self-contained (nothing loaded from outside).

- Drops sphinx-thebe's scripts from every page. Jupyter Book 1 always loads the
  sphinx_thebe extension; the book does not use Thebe (launch_buttons.thebe is
  off), and its page configuration names a CDN URL (and is emitted twice, which
  raises a JavaScript error).
- Removes duplicate <script> entries.
- After the build, warns (an error under ``-W``) about any script, stylesheet,
  image or frame in the HTML that points outside the site.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

_EXTERNAL = re.compile(
    r"<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=[\"'](?:https?:)?//[^\"']+"
    r"|<link\b(?=[^>]*\brel=[\"'](?:stylesheet|preload|modulepreload|icon|prefetch)[\"'])"
    r"[^>]*\bhref=[\"'](?:https?:)?//[^\"']+",
    re.IGNORECASE,
)


def _is_thebe(js) -> bool:
    filename = str(getattr(js, "filename", js) or "")
    body = getattr(js, "attributes", {}).get("body", "") or ""
    return filename.endswith("sphinx-thebe.js") or "THEBE_JS_URL" in body


def _clean_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    kept, seen = [], set()
    for js in scripts:
        key = (
            str(getattr(js, "filename", js)),
            tuple(sorted(getattr(js, "attributes", {}).items())),
        )
        if _is_thebe(js) or key in seen:
            continue
        seen.add(key)
        kept.append(js)
    context["script_files"] = kept


def _check_no_external_assets(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        for match in _EXTERNAL.finditer(text):
            logger.warning(
                "%s loads an asset from outside the site: %s",
                page.relative_to(outdir),
                match.group(0)[:200],
                type="offline_html",
            )


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", _clean_scripts, priority=900)
    app.connect("build-finished", _check_no_external_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
