# The two commands: `make book` and `make test`. Both set everything up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# EDITION=web (default): solutions folded behind a toggle; EDITION=course: solutions removed.
EDITION ?= web
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k attention"`.
PYTEST_ARGS ?=
# pytest-xdist workers of `make test`: one per core. A third worker on this project's two
# cores was measured side by side on one commit (39e9b89, clean clones, idle machine): three
# took 28.3 min of wall and 36 CPU min, two 27.2 min and 33 CPU min. tests/timeline.py's
# summary at the end of a run shows each worker's busy seconds against the wall.
JOBS ?= 2

.PHONY: help venv vendor sysdeps book test test-quick nbval bench release selftest clean

help:
	@echo "make book     set up, then build the whole book strictly (EDITION=web|course)"
	@echo "make test     set up, then run the whole test suite (each chapter executes once)"
	@echo "make test-quick  the tests not marked slow or book (no chapter execution)"
	@echo "make nbval    run each chapter notebook under nbval (a second execution; one-off)"
	@echo "make venv     only set up .venv (torch CPU build first, then requirements)"
	@echo "make bench    performance ratios of the reference package"
	@echo "make release  student notebooks and student package under release/ (CHAPTERS=04_self_attention)"
	@echo "make clean    remove build outputs"

# torch's CPU build comes from PyTorch's CPU wheel index (on Linux the plain index serves
# the CUDA build: about 3 GB more). Where that index cannot be reached (machines that reach
# PyPI only, like this project's own, whose pip finds the CPU build in a local wheel
# folder), the plain index is used, with a message. TORCH_INDEX= (empty) skips the index.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH := torch==2.13.0

# torch goes in first and on its own: with 2.13.0 present, nothing below pulls CUDA wheels.
$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_INDEX)" ] && $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=20)' "$(TORCH_INDEX)" 2>/dev/null; then \
	  echo "$(TORCH): the CPU build, from $(TORCH_INDEX)"; \
	  $(PY) -m pip install --quiet "$(TORCH)" --index-url "$(TORCH_INDEX)"; \
	else \
	  echo "$(TORCH): $(TORCH_INDEX) cannot be reached (or TORCH_INDEX is empty): from the plain index"; \
	  $(PY) -m pip install --quiet "$(TORCH)"; \
	fi
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (transformer-book)" >/dev/null
	touch $(STAMP)

venv: $(STAMP)

# System packages the tests use: headless Chromium for the browser test, bubblewrap
# for the grading sandbox, npm for the book's offline browser libraries. Installed
# when missing and we are root (CI, fresh machines).
SYSDEPS := chromium chromium-driver bubblewrap npm
sysdeps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing system packages:$$missing (run: sudo apt-get install$$missing)"; exit 1; \
	  fi; \
	fi

# The book's browser libraries (MathJax 3, require.js, the ipywidgets HTML manager),
# pinned in book/_vendor/package-lock.json and served from the book's own _static:
# the built HTML makes no request outside itself.
VENDOR := book/_vendor
VENDOR_STAMP := $(VENDOR)/node_modules/.installed
$(VENDOR_STAMP): $(VENDOR)/package.json $(VENDOR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing (run: sudo apt-get install npm)"; exit 1; }
	cd $(VENDOR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(VENDOR_STAMP)

vendor: $(VENDOR_STAMP)

book: venv vendor
	@start=$$(date +%s); \
	BOOK_EDITION=$(EDITION) $(VENV)/bin/jupyter-book build . -W -n --keep-going --builder html \
	  || { echo "book build FAILED: see the messages above (each names the notebook and cell)"; exit 1; }; \
	echo "book built in $$(( $$(date +%s) - start ))s: open $(CURDIR)/_build/html/index.html"

# Each chapter executes once per run: in the strict book build (hidden checks included,
# in cells removed from the pages), which the tests that need the build share
# (tests/book/test_executed_chapters.py asserts on its execution, and that the answered
# release is the code it ran). tests/scheduling.py sends every test module that reads the
# build to one worker, which builds first; the other workers run the rest meanwhile. A
# module with a module- or session-scoped fixture also goes whole to one worker, so its
# fixture (a graded class, the release of every chapter) is built once per run; the
# modules that read the release of every chapter (tests/released.py: the student
# packages, built nowhere else) are one group, on one worker; the longest units go out
# first, then those holding a test marked slow, the short tests last. Each worker runs
# torch on its share of the cores (two workers on two cores: one thread each; two
# threads each only spin against each other).
#
# The release runs execute only what differs from the build: each chapter's blank
# release, in the student's venv (chapter 10's decodes the run the build's chapter 9
# saved, as a student's chapter 10 decodes the run their chapter 9 saved). Every
# execution, the build's included, waits on its kernel in short slices and is kept with
# its cell timings under _build/test-executions/ (tests/notebook_runs.py); the session
# ends with the count of executions per chapter, by notebook ("book build 1,
# release-blank 1": the chapter once, its blank release once). Under CI=true a wall that
# cannot start fails its tests. The run ends with where its time went (each worker's
# busy seconds and the longest modules; every test phase kept in
# _build/test-timeline.jsonl) and, from `time`, the CPU seconds it used.
test: venv sysdeps vendor
	time $(PY) -m pytest -n $(JOBS) --durations=25 $(PYTEST_ARGS)

# The quick loop while editing: everything not marked slow and not reading the built book.
test-quick: venv
	$(PY) -m pytest -n $(JOBS) -m "not slow and not book" $(PYTEST_ARGS)

# nbval executes every chapter again, as a student's `pytest --nbval-lax` would.
nbval: venv
	$(PY) -m pytest -n $(JOBS) --run-nbval -m nbval_execution tests/notebooks $(PYTEST_ARGS)

bench: venv
	$(PY) -m solutions bench

# CHAPTERS="04_self_attention" releases one chapter (default: all); each release writes
# the student notebooks and the student package (release/transformer_book_student-*.whl).
CHAPTERS ?=
release: venv
	$(PY) -m autograder release --out release $(CHAPTERS)

selftest: venv
	$(PY) -m autograder selftest

clean:
	rm -rf _build release .pytest_cache
