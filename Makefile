# omnimesh: `make serve` serves the mesh on the demo model; `make test` runs the suite. Both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
PORT ?= 50051
# The torch build that fits this machine: the CUDA build where a GPU driver answers, else the local CPU build.
comma := ,
HAS_GPU := $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo 1; fi)
TORCH_SPEC := $(if $(HAS_GPU),torch>=2.6$(comma)<2.15,torch==2.13.0)
# The CUDA build brings its own Triton; the CPU build gets the GPU machine's Triton, so the kernels' interpreter and
# sm_90 compile checks (tests/unit/kernels/*_check.py) run here too.
TRITON_SPEC := $(if $(HAS_GPU),,triton==3.6.0)

.PHONY: setup serve test demo-checkpoint protos check-protos clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml requirements.lock | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)" $(TRITON_SPEC)
	$(PIP) install -q -c requirements.lock -e ".[test]"  # versions locked: a new release changes nothing under us
	touch $(STAMP)

setup: $(STAMP)

demo-checkpoint: setup
	$(PY) -c "from runtime.model_path import resolve_model; print(resolve_model('demo'))"

serve: demo-checkpoint
	$(VENV)/bin/omnimesh up --model demo --port $(PORT)

test: setup
	-bash .ci/install-deploy-tools.sh  # helm, promtool, validators into .cache/tools; deploy tests skip what failed
	$(PY) -m pytest -q $(PYTEST_ARGS)

protos: setup
	$(PY) protos/build_stubs.py

clean:
	rm -rf $(VENV) .pytest_cache
