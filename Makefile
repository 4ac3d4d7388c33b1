# tuckerkit: `make demo` runs the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(PY)
	$(PIP) install -e ".[test]"
	touch $@

$(VENV)/.bench: pyproject.toml | $(PY)
	$(PIP) install -e ".[bench,test]"
	touch $@

demo: $(VENV)/.core
	$(PY) -m tuckerkit._demo

lint: $(VENV)/.test
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest

bench: $(VENV)/.bench
	$(PY) benchmarks/contractions.py
	$(PY) benchmarks/ttm.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
