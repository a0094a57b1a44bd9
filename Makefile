# Quick start: `make demo` and `make test` on a fresh clone (see README.md).
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint-imports wheel-check clean

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VPY) setup.py
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VPY) -m tvm_icca.cli demo

# the layer rules (.importlinter) first: a broken layer fails in seconds
test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q tests

# the wheel installed (not editable) in a fresh virtualenv runs `tvm-icca demo` (CI does this)
wheel-check: $(STAMP)
	.ci/run wheel

lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info .import_linter_cache
