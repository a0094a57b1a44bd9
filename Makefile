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
	$(PYTEST) -q -n auto --dist loadgroup --no-loadscope-reorder --durations=15 -m "not full_size and not long_run" tests

# CI runs these after `make test` (the rule: `make test` under 5 minutes on 2 cores):
# - full_size: the tests that compile a full-size zoo model (minutes each);
# - long_run: end-to-end tests whose point is a long real run, each capability kept in
#   `make test` by a fast test: signals at random moments in a sweep (test_dse_stopping; fast:
#   test_stopping_signals_*), a killed sweep resumed (test_dse_run; fast: the resumes of
#   test_rerun_*, test_resume_*), the Ray backend (fast: test_ray_addresses_*), get_started in an
#   empty folder (fast: its block parse; `make docs` and the tutorials run the same API), the
#   tutorials 05, 06 and 07 (fast: the other four; test_tuning_session, test_records_*,
#   test_partition, test_hardware, test_dse_run); and the costliest of parametrized families
#   whose other members stay (test_workloads: BERT on four chips, Llama2-70B and OPT prefill,
#   Llama2-70B prefill-then-decode; DiT's programs admitted by the device; the 5-layer
#   Elk-Full grouped search; the relaxed bound on a matmul-sum chain)
test-full: $(DOCS_STAMP)
	$(PYTEST) -q -n auto --dist loadgroup --no-loadscope-reorder --durations=10 -m "full_size or long_run" tests

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
