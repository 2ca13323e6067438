#!/usr/bin/env bash
# One GPU-machine call: every stage's GPU tests, the stage benchmarks at real dims, and the mesh on CUDA.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir bash bench/run_gpu_suite.sh
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:.:protos PYTHONUNBUFFERED=1 OMNIMESH_CACHE=/tmp/omc
OUT=${OUT:-/tmp/gpu-suite}
mkdir -p "$OUT"
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, transformers, triton, grpc; print(torch.__version__, transformers.__version__, triton.__version__, grpc.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SECONDS=0
timeout "${TEST_S:-220}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider tests/parity/thinker tests/parity/vision \
  tests/parity/audio tests/parity/talker 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "tests done at ${SECONDS}s"
timeout "${BENCH_S:-100}" python3 bench/vision/bench_vision_tower.py --out "$OUT/vision_tower.json" 2>&1 | tail -15
echo "vision bench done at ${SECONDS}s"
timeout "${BENCH_S:-100}" python3 bench/audio/bench_audio_encoder.py --out "$OUT/audio_encoder.json" 2>&1 | tail -15
echo "audio bench done at ${SECONDS}s"
timeout "${BENCH_S:-100}" python3 bench/talker/bench_talker.py --out "$OUT/talker.json" 2>&1 | tail -15
echo "talker bench done at ${SECONDS}s"
