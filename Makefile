# The two commands of the README: `make demo` (set up + distributed LeNet on the
# digits data) and `make test` (lint, C++ tests, Python tests). Everything lives
# in .venv; torch comes first so that pip never pulls a CUDA build.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
TORCH  ?= torch==2.13.0
BUILD_DEPS := scikit-build-core pybind11 grpcio-tools cmake ninja
CMAKE_FLAGS := --config-settings=cmake.define.POSEIDON_BUILD_TESTS=ON \
               --config-settings=cmake.define.POSEIDON_WERROR=ON
SOURCES := $(shell find caffe python poseidon -name '*.cc' -o -name '*.h' -o -name '*.cpp' \
             -o -name '*.proto' -o -name 'CMakeLists.txt' 2>/dev/null) CMakeLists.txt pyproject.toml
# The editable install maps each Python module to its file once: a module added, moved or
# removed (a directory's entries change) needs a reinstall.
SOURCES += $(shell find caffe python -type d -not -path '*/__pycache__*' 2>/dev/null)

.PHONY: setup build demo test lint format pytest ctest bench clean

setup: $(VENV)/.deps build

$(VENV)/.deps:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH)"
	$(PIP) install $(BUILD_DEPS)
	touch $@

# Incremental: scikit-build-core keeps its CMake tree in build/py.
build: $(VENV)/.built
$(VENV)/.built: $(VENV)/.deps $(SOURCES)
	$(PIP) install --no-build-isolation $(CMAKE_FLAGS) -e ".[test,demo,bench]"
	touch $@

demo: setup
	$(VENV)/bin/poseidon demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

ctest: setup
	ctest --test-dir build/py --output-on-failure --timeout 120

pytest: setup
	$(PY) -m pytest -q --durations=30 tests

test: lint ctest pytest

clean:
	rm -rf build $(VENV) .pytest_cache
