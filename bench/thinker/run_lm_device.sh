#!/usr/bin/env bash
# One GPU-machine call for the other decoder families (bench/thinker/bench_lm.py): Qwen3.5 9B and 35B-A3B text->text
# at c = 1 / 32, and Qwen3-ASR's 1.7B LM at c = 1 / 16 / 32 / 64 on an ASR-shaped request (72 prompt tokens: a 4 s
# clip's 52 audio tokens and the template; 40 output tokens), each with transformers `generate` on the same weights.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [FAMILIES="qwen3.5-9b ..."] [GPU_TESTS=tests/parity/qwen3_5] bash bench/thinker/run_lm_device.sh
source bench/device_setup.sh /tmp/lm-gpu
SECONDS=0
if [ -n "${GPU_TESTS:-}" ]; then
  timeout "${TEST_S:-120}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider $GPU_TESTS 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -15
  echo "tests done at ${SECONDS}s"
fi
declare -A ARGS=(
  [qwen3.5-9b]="--concurrency 1 32"
  [qwen3.5-35b-a3b]="--concurrency 1 32"
  [qwen3-asr-1.7b]="--prompt-tokens 72 --output-tokens 40 --concurrency 1 16 32 64 --hf-batches 1 32 --hf-new-tokens 40"
)
for family in ${FAMILIES:-qwen3.5-9b qwen3.5-35b-a3b qwen3-asr-1.7b}; do
  timeout "${BENCH_S:-200}" python3 bench/thinker/bench_lm.py --family "$family" ${ARGS[$family]} \
    --out "$OUT/$family.json" > "$OUT/$family.log" 2>&1
  echo "$family done at ${SECONDS}s (rc $?)"
  python3 - "$OUT/$family.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("  phases", {k: round(v, 1) for k, v in d.get("phase_s", {}).items()}, "errors", list(d.get("errors", {})))
for lv in d.get("engine", {}).get("levels", []):
    ds = lv.get("decode_steps", {})
    print("  c", lv["concurrency"], "tok/s", round(lv.get("output_tok_s") or 0, 1), "ttft p50", lv.get("ttft_ms_p50"),
          "tpot", lv.get("tpot_ms_p50"), "step", ds.get("step_ms_p50"), "floor", ds.get("hbm_floor_ms"))
print("  hf", [(r["batch"], round(r["output_tok_s"], 1), r.get("experts_touched")) for r in d.get("transformers", {}).get("runs", [])])
print("  routing", {k: (round(v["measured"], 1), round(v["uniform"], 1)) for k, v in d.get("routing", {}).get("experts_touched", {}).items()})
print("  summary", json.dumps(d.get("summary", {})))
PY
done
