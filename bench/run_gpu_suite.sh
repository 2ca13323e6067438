#!/usr/bin/env bash
# One GPU-machine call: every stage's GPU tests, the stage benchmarks at real dims, and the mesh on CUDA.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir [BENCHES="vision audio talker"] [MESH=1] bash bench/run_gpu_suite.sh
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:.:protos PYTHONUNBUFFERED=1 OMNIMESH_CACHE=/tmp/omc
OUT=${OUT:-/tmp/gpu-suite}
mkdir -p "$OUT"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, transformers, triton, grpc; print(torch.__version__, transformers.__version__, triton.__version__, grpc.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SECONDS=0
timeout "${TEST_S:-220}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider tests/parity/thinker tests/parity/vision \
  tests/parity/audio tests/parity/talker 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "tests done at ${SECONDS}s"
# each stage's own-model benchmark (the other bench_*.py of a folder measure parts, or the mesh)
declare -A STAGE_BENCH=([vision]=bench_vision_tower.py [audio]=bench_audio_encoder.py [talker]=bench_talker.py)
for stage in ${BENCHES-vision audio talker}; do
  script=bench/$stage/${STAGE_BENCH[$stage]}
  timeout "${BENCH_S:-100}" python3 "$script" --out "$OUT/$stage.json" 2>&1 | tail -12
  echo "$stage bench done at ${SECONDS}s"
done
if [ "${MESH:-1}" = 1 ]; then
  bash bench/gpu_mesh_smoke.sh "$OUT" 2>&1 | tail -30
  echo "mesh smoke done at ${SECONDS}s"
fi
