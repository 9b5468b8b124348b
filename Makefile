# The two commands of the README: `make demo` and `make test`. Each creates .venv when missing
# and installs what it needs into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is optional (the torch tests skip without it); the CPU build is enough for them, and on
# Linux PyPI's default torch wheel is the multi-GB CUDA build, so the CPU index is used (the
# default index only when the CPU index cannot be reached).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The GPU engine for `make demo`: the extra that matches the NVIDIA driver's CUDA major version
# (none without a driver: the demo then runs on NumPy/SciPy and needs only scikit-learn).
GPU_EXTRA ?= $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/cuda\1/p' | head -n 1)
DEMO_EXTRAS ?= sklearn$(if $(GPU_EXTRA),$(comma)$(GPU_EXTRA))
DEMO_ARGS ?=
comma := ,

.PHONY: test demo docs bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[$*]"
	touch $@

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/python -m pip install -q --retries 1 --timeout 20 --index-url "$(TORCH_INDEX)" \
		"$(TORCH_SPEC)" \
		|| $(BIN)/python -m pip install -q "$(TORCH_SPEC)" \
		|| echo "torch not installed: its tests skip"
	touch $@

# The linters first (ruff: pyproject's [tool.ruff]; mypy: [tool.mypy]), then the tests.
test: $(VENV)/.installed-test $(VENV)/.torch
	$(BIN)/python -m ruff check gpulinalg tests benchmarks conftest.py docs/conf.py
	$(BIN)/python -m mypy --no-incremental
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Without a GPU: small sizes, under a minute on 2 cores. With one: the full tour.
# `make demo DEMO_ARGS=--full` runs the big tour anywhere, `DEMO_ARGS=--small` the short one.
demo: $(VENV)/.installed-$(DEMO_EXTRAS)
	$(BIN)/python -m gpulinalg info
	@echo
	$(BIN)/python -m gpulinalg demo $(DEMO_ARGS)

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks all --json benchmarks/results/latest.json

# Warnings fail the build; torch (CPU) is installed so that the torch layers' pages build.
docs: $(VENV)/.installed-docs $(VENV)/.torch
	$(BIN)/python -m sphinx -q -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) docs/_build .pytest_cache

# On the GPU machine, from a source tree with PYTHONPATH set (creates no venv): the gpu-marked
# tests with the hand-written kernels on, again with them off (every op on its library route),
# then the kernel tests under compute-sanitizer where it is installed (memcheck: every kernel
# test; racecheck, many times slower: the differential tests, which launch every kernel). Only
# our kernels (named gl_* or gpulinalg_*) are instrumented: the libraries' run at full speed.
# The suite runs in several processes on the one GPU where pytest-xdist is installed, each
# with two BLAS threads (a process per core each with a thread per core thrashed the CPUs),
# decomp apart from the rest (all at once, the memory-hungry tests ran an 80 GB card out).
GPU_WORKERS ?= 10
GPU_XDIST = $(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(GPU_WORKERS)")
SANITIZER ?= $(shell command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
SANITIZE_OURS = --kernel-name kns=gl_ --kernel-name kns=gpulinalg_
# a graph capture fails under the sanitizer (the chain then runs directly, as it should)
NOT_UNDER_SANITIZER = -k "not replayed"
.PHONY: gpu-test
gpu-test: export OMP_NUM_THREADS = 2
gpu-test: export OPENBLAS_NUM_THREADS = 2
gpu-test: export MKL_NUM_THREADS = 2
gpu-test:
	$(PYTHON) -m pytest -m gpu -q tests/decomp $(GPU_XDIST)
	$(PYTHON) -m pytest -m gpu -q tests --ignore=tests/decomp $(GPU_XDIST)
	$(PYTHON) -m pytest -m gpu -q tests/decomp --custom-kernels=off $(GPU_XDIST)
	$(PYTHON) -m pytest -m gpu -q tests --ignore=tests/decomp --custom-kernels=off $(GPU_XDIST)
	@if [ -n "$(SANITIZER)" ]; then \
		$(SANITIZER) --tool memcheck $(SANITIZE_OURS) --error-exitcode 1 $(PYTHON) -m pytest -m gpu -q -p no:cacheprovider tests/decomp/_kernels $(NOT_UNDER_SANITIZER) && \
		$(SANITIZER) --tool racecheck $(SANITIZE_OURS) --error-exitcode 1 $(PYTHON) -m pytest -m gpu -q -p no:cacheprovider tests/decomp/_kernels/test_kernels_differential_gpu.py $(NOT_UNDER_SANITIZER); \
	else echo "compute-sanitizer is absent: the memcheck and racecheck runs are skipped"; fi
