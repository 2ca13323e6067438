#!/usr/bin/env bash
# One GPU-machine call: the kernels' GPU tests, the fused-MoE tuner, then the benchmarks (kernels alone, then the
# Thinker's per-layer decode chains before/after fusion); everything lands in $OUT.
# Usage (repo root, on the device):  OUT=/some/dir bash bench/kernels/run_device.sh
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kernels-out}
mkdir -p "$OUT"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,temperature.gpu --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SECONDS=0
timeout "${TEST_S:-160}" python3 -m pytest tests/unit/kernels/test_kernel_*_gpu.py -q -m gpu --noconftest -rfE 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "tests: ${SECONDS}s"
if [ "${SKIP_TUNE:-0}" != 1 ]; then
  timeout "${TUNE_S:-200}" python3 bench/kernels/tune_moe.py --out "$OUT/fused_moe_tuned.json" \
    --log "$OUT/tune_log.json" --budget-s "${TUNE_BUDGET:-130}" 2>&1 | tee "$OUT/tune.log"
  echo "tune: ${SECONDS}s"
fi
CFG=${MOE_CFG:-$OUT/fused_moe_tuned.json}
timeout "${BENCH_S:-140}" python3 bench/kernels/bench_kernels.py --out "$OUT/bench.json" \
  $( [ -f "$CFG" ] && echo --moe-config "$CFG" ) 2>&1 | tee "$OUT/bench.log" | tail -60
echo "bench: ${SECONDS}s"
timeout "${LAYER_S:-120}" python3 bench/kernels/bench_decode_layer.py --out "$OUT/decode_layer.json" \
  $( [ -f "$CFG" ] && echo --moe-config "$CFG" ) 2>&1 \
  | tee "$OUT/decode_layer.log" | tail -30
echo "decode layer: ${SECONDS}s"
