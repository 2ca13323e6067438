#!/usr/bin/env bash
# One GPU-machine call: every stage's GPU tests, the stage benchmarks at real dims, and the mesh on CUDA.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir [GPU_TESTS="tests/parity/asr ..."] [BENCHES="vision audio talker"] [MESH=1] bash bench/run_gpu_suite.sh
source bench/device_setup.sh /tmp/gpu-suite
SECONDS=0
# every GPU-marked test of the tree (kernels against their PyTorch paths, each family's GPU parity)
timeout "${TEST_S:-220}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider --continue-on-collection-errors ${GPU_TESTS:-tests} 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -25
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
