# The two commands of the README: `make demo` and `make test`. Each creates .venv when missing
# and installs what it needs into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is optional (the torch tests skip without it); the CPU build is enough for them.
TORCH_SPEC ?= torch==2.13.0

.PHONY: test demo docs bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[$*]"
	touch $@

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" || echo "torch not installed: its tests skip"
	touch $@

test: $(VENV)/.installed-test $(VENV)/.torch
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(VENV)/.installed-test
	$(BIN)/python -m gpulinalg info
	$(BIN)/python -m gpulinalg demo

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks all --json benchmarks/results/latest.json

docs: $(VENV)/.installed-docs
	$(BIN)/python -m sphinx -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) docs/_build .pytest_cache
