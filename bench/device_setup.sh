#!/usr/bin/env bash
# Sourced first by every GPU-machine script (bench/run_gpu_suite.sh, bench/thinker/run_*.sh): the wheels of
# bench/gpu-wheels.txt (carried in .whl/) installed beside the image's packages, the import paths set, $OUT made
# (default: $1), and what the machine is written to $OUT/env.txt for the result files.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:.:protos PYTHONUNBUFFERED=1 OMNIMESH_CACHE=/tmp/omc
OUT=${OUT:-$1}
mkdir -p "$OUT"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, transformers, triton, grpc; print(torch.__version__, transformers.__version__, triton.__version__, grpc.__version__)"
  df -h /dev/shm /tmp | tail -2; free -g | head -2; nproc
  lscpu | grep -E 'Model name|MHz'  # the host CPU: gateway-bound figures move with it from machine to machine
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
