# Quick start: `make demo` and `make test` on a fresh clone (see README.md).
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: install demo test test-full lint-imports wheel-check docs clean

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VPY) setup.py
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e ".[test,dse]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VPY) -m tvm_icca.cli demo

# the layer rules (.importlinter) first: a broken layer fails in seconds; then the suite on
# one pytest-xdist worker per core (tests sharing a costly fixture stay on one worker: loadgroup;
# tests marked slow first, in tests/conftest.py's order: no-loadscope-reorder); the docs extra
# too, since tests render the CLI reference and the Results pages as the docs build does.
# The suite starts dozens of interpreters (xdist workers, tutorials, command lines, sweep
# workers): each imports tvm_icca from compiled bytecode, and pytest's assertion rewrites are
# kept, even where the environment says PYTHONDONTWRITEBYTECODE (collection 12.6 -> 6.1 s)
PYTEST := PYTHONDONTWRITEBYTECODE= $(VPY) -m pytest
test: $(DOCS_STAMP)
	$(VENV)/bin/lint-imports
	$(PYTEST) -q -n auto --dist loadgroup --no-loadscope-reorder --durations=15 -m "not full_size" tests

# the tests that compile a full-size zoo model (minutes each; CI runs them after `make test`)
test-full: $(DOCS_STAMP)
	$(PYTEST) -q -n auto --dist loadgroup --no-loadscope-reorder --durations=5 -m full_size tests

# the wheel installed (not editable) in a fresh virtualenv runs `tvm-icca demo` (CI does this)
wheel-check: $(STAMP)
	.ci/run wheel

lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

$(DOCS_STAMP): $(STAMP) setup.py
	$(VPY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

# the documentation site in docs/_build/html; it runs the tutorials, warnings are errors
docs: $(DOCS_STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# the second line: what `make docs` generates (docs/conf.py, docs/_ext/results_pages.py)
clean:
	rm -rf $(VENV) build *.egg-info .import_linter_cache
	rm -rf docs/_build docs/tutorials docs/results docs/sg_execution_times.rst
