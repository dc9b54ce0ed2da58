#!/usr/bin/env bash
# Fetch the third-party JavaScript the built book serves from its own _static/
# (the source folder is _assets/, see html_static_path in _config.yml), so that
# the HTML loads nothing from outside the site:
#   - MathJax 3 (its es5/ folder, fonts included)            -> _assets/vendor/mathjax/
#   - RequireJS (require.js, needed by the ipywidgets embed)  -> _assets/vendor/requirejs/
#   - @jupyter-widgets/html-manager 1.x (ipywidgets 8 embed) -> _assets/vendor/html-manager/
#   - axe-core 4 (the accessibility audit of tests/test_html.py; no page loads it)
#                                                             -> _assets/vendor/axe/
# The files come from the npm registry at set-up time and are not committed
# (_assets/vendor/ is gitignored). A stamp file makes a second run a no-op.
set -euo pipefail

MATHJAX_VERSION=3.2.2
REQUIREJS_VERSION=2.3.8
HTML_MANAGER_VERSION=1.0.15
AXE_VERSION=4.14.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/_assets/vendor"
stamp="$dest/.stamp-mathjax-$MATHJAX_VERSION-requirejs-$REQUIREJS_VERSION-html-manager-$HTML_MANAGER_VERSION-axe-$AXE_VERSION"

if [[ -f "$stamp" ]]; then
    exit 0
fi

command -v npm >/dev/null || { echo "vendor_assets.sh: npm is needed (Node.js 18 or newer)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "Fetching MathJax $MATHJAX_VERSION, RequireJS $REQUIREJS_VERSION," \
     "@jupyter-widgets/html-manager $HTML_MANAGER_VERSION and axe-core $AXE_VERSION from the npm registry"
# `npm pack` downloads a package's tarball only, without its dependency tree.
(cd "$work" && npm pack --silent \
    "mathjax@$MATHJAX_VERSION" \
    "requirejs@$REQUIREJS_VERSION" \
    "@jupyter-widgets/html-manager@$HTML_MANAGER_VERSION" \
    "axe-core@$AXE_VERSION" >/dev/null)

rm -rf "$dest"
mkdir -p "$dest/mathjax" "$dest/requirejs" "$dest/html-manager" "$dest/axe"

mkdir "$work/mathjax" "$work/requirejs" "$work/html-manager" "$work/axe"
tar -xzf "$work/mathjax-$MATHJAX_VERSION.tgz" -C "$work/mathjax"
tar -xzf "$work/requirejs-$REQUIREJS_VERSION.tgz" -C "$work/requirejs"
tar -xzf "$work/jupyter-widgets-html-manager-$HTML_MANAGER_VERSION.tgz" -C "$work/html-manager"
tar -xzf "$work/axe-core-$AXE_VERSION.tgz" -C "$work/axe"

# MathJax: the whole es5/ folder (tex-chtml.js loads its fonts and extensions
# relative to its own location). Keep the license next to it.
cp -R "$work/mathjax/package/es5/." "$dest/mathjax/"
cp "$work/mathjax/package/LICENSE" "$dest/mathjax/"

cp "$work/requirejs/package/require.js" "$dest/requirejs/"
cp "$work/requirejs/package/LICENSE" "$dest/requirejs/" 2>/dev/null || true

# html-manager: embed-amd.js plus the font files its bundled CSS refers to
# (it resolves them relative to its own URL); no source maps.
find "$work/html-manager/package/dist" -maxdepth 1 -type f \
    \( -name 'embed-amd.js' -o -name '*.woff' -o -name '*.woff2' -o -name '*.ttf' \
       -o -name '*.eot' -o -name '*.svg' \) -exec cp {} "$dest/html-manager/" \;
cp "$work/html-manager/package/LICENSE" "$dest/html-manager/" 2>/dev/null || true

# axe-core: its one-file build and its license (MPL-2.0).
cp "$work/axe/package/axe.min.js" "$work/axe/package/LICENSE" "$dest/axe/"

test -f "$dest/mathjax/tex-chtml.js"
test -f "$dest/requirejs/require.js"
test -f "$dest/html-manager/embed-amd.js"
test -f "$dest/axe/axe.min.js"

touch "$stamp"
echo "Vendored assets are in $dest ($(du -sh "$dest" | cut -f1))"
