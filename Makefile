# tuckerkit: `make demo` runs the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint bench docs examples clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(PY)
	$(PIP) install -e ".[test]"
	touch $@

$(VENV)/.docs: pyproject.toml | $(PY)
	$(PIP) install -e ".[docs]"
	touch $@

$(VENV)/.bench: pyproject.toml | $(PY)
	$(PIP) install -e ".[bench,test]"
	touch $@

demo: $(VENV)/.core
	$(PY) -m tuckerkit._demo
	@mkdir -p .demo
	$(PY) -c "from tuckerkit.datasets import make_low_rank_tucker as t, make_low_rank_cp as c; import numpy as np; \
	np.save('.demo/tucker_200.npy', t((200, 200, 200), (10, 10, 10), noise=0.01, random_state=0).data); \
	np.save('.demo/cp_250.npy', c((250, 250, 250), 10, noise=0.01, random_state=0).data)"
	$(VENV)/bin/tuckerkit info .demo/tucker_200.npy
	$(VENV)/bin/tuckerkit decompose .demo/tucker_200.npy --max-error 0.02 --force
	$(VENV)/bin/tuckerkit decompose .demo/cp_250.npy --method cp --rank 10 --seed 0 --force

lint: $(VENV)/.test
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest

# the documentation site, warnings are errors: docs/_build/html/index.html
docs: $(VENV)/.docs
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs built: docs/_build/html/index.html"

# re-execute the example notebooks and save them with their outputs
examples: $(VENV)/.test
	$(PY) examples/run_notebooks.py

bench: $(VENV)/.bench
	$(PY) benchmarks/contractions.py
	$(PY) benchmarks/ttm.py
	$(PY) benchmarks/tucker.py
	$(PY) benchmarks/cp.py
	$(PY) benchmarks/sparse.py

clean:
	rm -rf $(VENV) .demo build *.egg-info .pytest_cache .mypy_cache .ruff_cache docs/_build docs/_generated
