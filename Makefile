# tuckerkit: `make demo` runs the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test test-gpu lint bench docs examples clean

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

# two pytest workers: most of a cold run is numba compiling one kernel at a time (9m57s -> 4m32s on 2 cores)
test: lint
	$(PY) -m pytest -n 2

# The real-GPU tests and benchmarks/gpu.py, on a machine where cupy is preinstalled and no package registry is
# reachable: a venv over GPU_PYTHON's packages (also when GPU_PYTHON is itself a venv, as the GPU image's
# python3 is), the wheels in WHEELS installed from that folder only (e.g. tensorly for the benchmark's
# columns; pytest, hypothesis, setuptools>=69 when missing), tuckerkit installed with no dependencies and no
# build isolation. It FAILS (exit status non-zero, one line "test-gpu: FAILED: ...") where cupy, a GPU or a
# test tool is missing, and the real-cupy tests fail rather than skip (TUCKERKIT_REQUIRE_GPU=1).
# GPU_BENCH="" runs the full benchmark (long); results in benchmarks/results/gpu{_quick,}.{json,md,png}.
#   make test-gpu [GPU_PYTHON=python3] [WHEELS=dir/of/wheels] [GPU_BENCH=--quick]
GPU_PYTHON ?= python3
GPU_VENV   ?= .venv/gpu
WHEELS     ?=
GPU_BENCH  ?= --quick
GPU_PY     := $(GPU_VENV)/bin/python

define GPU_CHECK
import sys
try:
    import cupy
except Exception as exc:
    sys.exit(f"test-gpu: FAILED: {sys.executable} cannot import cupy ({type(exc).__name__}: {exc}); run it where "
             "cupy is installed or name that interpreter: make test-gpu GPU_PYTHON=/path/to/python")
try:
    count = int(cupy.cuda.runtime.getDeviceCount())
except Exception as exc:
    count, why = 0, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no details'}"
else:
    why = "no device"
if count < 1:
    sys.exit(f"test-gpu: FAILED: cupy {cupy.__version__} finds no usable CUDA GPU ({why})")
name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
name = name.decode() if isinstance(name, bytes) else name
print(f"test-gpu: cupy {cupy.__version__}, {count} GPU(s), cuda:0 is {name}")
endef
export GPU_CHECK

define GPU_SITE
import site
paths = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if p]
print("\n".join(dict.fromkeys(paths)))
endef
export GPU_SITE

define GPU_TOOLS
import importlib.metadata as md, importlib.util, sys
missing = [m for m in ("pip", "pytest", "hypothesis", "setuptools") if importlib.util.find_spec(m) is None]
if "setuptools" not in missing:
    found = md.version("setuptools")
    v = tuple(int(x) for x in found.split(".")[:2] if x.isdigit())
    if v < (69, 0) or (v < (70, 1) and importlib.util.find_spec("wheel") is None):
        missing.append(f"setuptools>=70.1 (found {found})")
if missing:
    sys.exit(f"test-gpu: FAILED: {', '.join(missing)} missing next to cupy; carry the wheels: make test-gpu "
             "WHEELS=dir/of/wheels")
endef
export GPU_TOOLS

test-gpu:
	@$(GPU_PYTHON) -c "$$GPU_CHECK"
	@test -x $(GPU_PY) || $(GPU_PYTHON) -m venv --system-site-packages --without-pip $(GPU_VENV)
	@$(GPU_PYTHON) -c "$$GPU_SITE" > "$$($(GPU_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_gpu_python.pth"
	@if [ -n "$(WHEELS)" ]; then $(GPU_PY) -m pip install --disable-pip-version-check -q --no-index \
	    --find-links "$(WHEELS)" "$(WHEELS)"/*.whl; fi
	@$(GPU_PY) -c "$$GPU_TOOLS"
	$(GPU_PY) -m pip install --disable-pip-version-check -q --no-index --no-deps --no-build-isolation -e .
	TUCKERKIT_REQUIRE_GPU=1 $(GPU_PY) -m pytest tests/test_gpu.py -p no:cacheprovider -q
	TUCKERKIT_REQUIRE_GPU=1 $(GPU_PY) benchmarks/gpu.py $(GPU_BENCH)

# the documentation site, warnings are errors: docs/_build/html/index.html
docs: $(VENV)/.docs
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs built: docs/_build/html/index.html"

# re-execute the example notebooks and save them with their outputs
examples: $(VENV)/.test
	$(PY) examples/run_notebooks.py

# benchmarks run on the machine's own OpenBLAS kernel (the pinning variables unset; the kernel that ran is
# recorded in each results file)
BENCH_PY := env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY)

bench: $(VENV)/.bench
	$(BENCH_PY) benchmarks/roofline.py
	$(BENCH_PY) benchmarks/contractions.py
	$(BENCH_PY) benchmarks/contractions.py --warm
	$(BENCH_PY) benchmarks/ttm.py
	$(BENCH_PY) benchmarks/mttkrp.py
	$(BENCH_PY) benchmarks/batched_dot.py
	$(BENCH_PY) benchmarks/kinds.py
	$(BENCH_PY) benchmarks/tucker.py
	$(BENCH_PY) benchmarks/cp.py
	$(BENCH_PY) benchmarks/shapes.py
	$(BENCH_PY) benchmarks/defaults.py
	$(BENCH_PY) benchmarks/small.py
	$(BENCH_PY) benchmarks/whole_run.py
	$(BENCH_PY) benchmarks/sparse_tensors.py
	$(BENCH_PY) benchmarks/features.py
	$(BENCH_PY) benchmarks/compat.py

clean:
	rm -rf $(VENV) .demo build *.egg-info .pytest_cache .mypy_cache .ruff_cache docs/_build docs/_generated
