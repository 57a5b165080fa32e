# One-word runner. `make book` builds the website, `make test` runs every test.
PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: setup lock book pdf test benchmark release check kit clean

setup: $(STAMP)

# Every package from requirements.lock, each checked against its hashes; then the project
# itself (editable: nothing of it is a download).
$(STAMP): pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# After a change of pyproject.toml's pins: resolve them afresh, write requirements.lock and
# environment.yml (tools/lock.py), then `make setup` installs the new lock.
lock:
	@test -x $(PY) || $(MAKE) setup
	$(PY) tools/lock.py

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

# The student kit (autograder/kit.py) of the chapters up to THROUGH, the last chapter open to
# the class: the student package's wheel, their notebooks, one zip. THROUGH=all is the kit of
# every chapter, for self-study; there is no default.
#   make kit THROUGH=04_dot_product_attention
ifneq ($(filter kit,$(MAKECMDGOALS)),)
ifeq ($(strip $(THROUGH)),)
$(error make kit needs THROUGH, the last chapter open to the class: make kit THROUGH=04_dot_product_attention (or THROUGH=all for a self-study kit of every chapter, which holds the earlier chapters' answers))
endif
endif
kit: setup
	$(PY) -m autograder kit --out _build/kit --through $(THROUGH)

check: setup
	$(PY) -m autograder check

clean:
	rm -rf _build test-artifacts
