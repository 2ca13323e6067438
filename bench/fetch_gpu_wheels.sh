#!/usr/bin/env bash
# The wheels bench/gpu-wheels.txt names, for the GPU machine's Python (3.12, manylinux x86_64), into .whl/ (carried
# to the machine by `run`'s carry, installed there by bench/device_setup.sh); versions as requirements.lock pins them.
set -euo pipefail
cd "$(dirname "$0")/.."
# --no-http: without the wheels marked `# http` (what a call carries is capped at 64 MiB with the tree)
skip='^$'
[ "${1:-}" = "--no-http" ] && skip='# http$'
rm -rf .whl && mkdir .whl
grep -v '^#' bench/gpu-wheels.txt | grep -v '^$' | grep -v -- "$skip" | sed 's/ *#.*//' > /tmp/gpu-wheels.req
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -c requirements.lock -d .whl -r /tmp/gpu-wheels.req
ls .whl
