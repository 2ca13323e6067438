# omnimesh: `make serve` serves the mesh on the demo model; `make test` runs the suite. Both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
PORT ?= 50051
# The torch build that fits this machine: the CUDA build where a GPU driver answers, else the local CPU build.
TORCH_SPEC := $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo 'torch>=2.6,<2.15'; else echo 'torch==2.13.0'; fi)

.PHONY: setup serve test demo-checkpoint protos check-protos clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml requirements.lock | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
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
