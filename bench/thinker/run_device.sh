#!/usr/bin/env bash
# One GPU-machine call for the thinker: the GPU tests of its kernel path and CUDA graphs, then the text->text
# benchmark at real dims with random bf16 weights (engine-only, transformers, through the gateway).
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha written here> [TEST_PATHS=tests/parity/thinker] [TEST_S=150] [BENCH_S=330] \
#     [BENCH_ARGS="--hf-new-tokens 32"] [TESTS=0] bash bench/thinker/run_device.sh
source bench/device_setup.sh /tmp/thinker-gpu
SECONDS=0
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_S:-150}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider ${TEST_PATHS:-tests/parity/thinker} 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -25
  echo "tests done at ${SECONDS}s"
fi
timeout "${BENCH_S:-330}" python3 bench/thinker/bench_thinker.py --random-weights --out "$OUT/thinker.json" \
  ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -E "bench_thinker|Error|error|Traceback" | tail -40
echo "bench done at ${SECONDS}s"
python3 - "$OUT/thinker.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("phases", {k: round(v, 1) for k, v in d.get("phase_s", {}).items()}, "errors", list(d.get("errors", {})))
for mode in ("engine", "gateway"):
    for lv in d.get(mode, {}).get("levels", []):
        ds = lv.get("decode_steps", {})
        print(mode, lv["concurrency"], "tok/s", round(lv.get("output_tok_s") or 0, 1), "ttft p50/p99",
              lv.get("ttft_ms_p50"), lv.get("ttft_ms_p99"), "tpot", lv.get("tpot_ms_p50"),
              "step", ds.get("step_ms_p50"), "model", ds.get("model_ms_p50"), "roof", ds.get("roofline_ratio_step"))
    if "long_prompt" in d.get(mode, {}):
        print(mode, "long ttft p50", d[mode]["long_prompt"].get("ttft_ms_p50"))
for r in d.get("engine", {}).get("graph_replay", []):
    print("replay", r)
print("hf", d.get("transformers", {}).get("runs"))
print("summary", json.dumps(d.get("summary", {})))
PY
