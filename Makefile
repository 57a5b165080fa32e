# One-word runner. `make book` builds the website, `make test` runs every test.
PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: setup book pdf test benchmark release check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

book: setup
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "The website is in _build/html: open _build/html/index.html, or serve it with"
	@echo "  $(PY) -m http.server --directory _build/html 8000   and visit http://localhost:8000"

# The whole course as one PDF (book/pdf.py): the site built afresh, printed by Chromium.
pdf: book
	$(PY) book/pdf.py --site _build/html --out _build/pdf/attention-course.pdf

test: setup
	$(PY) -m pytest

benchmark: setup
	$(PY) -m benchmarks.run

release: setup
	$(PY) -m autograder release

check: setup
	$(PY) -m autograder check

clean:
	rm -rf _build test-artifacts
