#!/usr/bin/env bash
# One GPU-machine call that decides whether the decode norms belong inside the skinny GEMMs (RowNorm; bench/kernels/
# NOTES.md run 9): their GPU tests, then on one host Qwen3-ASR's one-row decode graph without and with
# (profile_lm.py, which also profiles the context-wide graph beside the short one it replays, services/thinker/
# graphs.py) and the talker frame with the code predictor without and with (bench_talker.py).
# A call may run 10 minutes: PARTS picks what this one runs (tests ~5 min, asr ~4, talker ~3, omni ~8).
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir PARTS="tests asr" bash bench/kernels/run_norms_in_gemms.sh; then PARTS="talker omni"
source bench/device_setup.sh /tmp/norms-in-gemms
SECONDS=0
PARTS=" ${PARTS:-tests asr} "
[[ $PARTS == *" tests "* ]] && timeout "${TEST_S:-300}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider \
  tests/unit/kernels/test_kernel_skinny_gemm_gpu.py tests/unit/kernels/test_kernel_moe_gpu.py \
  tests/parity/asr/test_asr_gpu.py tests/parity/talker/test_talker_gpu.py \
  tests/parity/thinker/test_thinker_kernel_path_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
echo "tests done at ${SECONDS}s"
[[ $PARTS == *" asr "* ]] && for flag in "" --norms-in-gemms; do
  timeout "${PROFILE_S:-150}" python3 bench/thinker/profile_lm.py --family qwen3-asr-1.7b --prompt-tokens 65 --rows 32 \
    $flag --out "$OUT/asr-lm-profile${flag:+-norms-in-gemms}.json" > "$OUT/asr-lm-profile${flag}.log" 2>&1
  echo "profile_lm ${flag:-(norm launches)} done at ${SECONDS}s (rc $?)"
done
if [[ $PARTS == *" omni "* ]]; then  # the Omni thinker's one-row decode graph (MoE layers on the stream)
  for flag in "" --norms-in-gemms; do
    timeout "${OMNI_S:-240}" python3 bench/thinker/bench_thinker.py --random-weights --skip-hf --modes engine \
      --concurrency 1 --long-prompt-tokens 0 $flag --out "$OUT/omni-engine${flag:+-norms-in-gemms}.json" \
      > "$OUT/omni-engine${flag}.log" 2>&1
    echo "bench_thinker ${flag:-(norm launches)} done at ${SECONDS}s (rc $?)"
  done
fi
if [[ $PARTS == *" talker "* ]]; then
  timeout "${TALKER_S:-200}" python3 bench/talker/bench_talker.py --batches 1 8 --paths graphs graphs-norms-in-gemms \
    --out "$OUT/talker-norms-in-gemms.json" > "$OUT/talker.log" 2>&1
  echo "bench_talker done at ${SECONDS}s (rc $?)"
fi
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("asr-lm-profile.json", "asr-lm-profile-norms-in-gemms.json"):
    if (out / name).exists():
        d = json.loads((out / name).read_text())
        steps = [*d["decode"], d.get("decode_wide_tables", {})]
        print(name, [(s["rows"], s.get("graph"), round(s["device_us_per_step"], 1), s["kernels_per_step"])
                     for s in steps if s])
for name in ("omni-engine.json", "omni-engine-norms-in-gemms.json"):
    if (out / name).exists():
        d = json.loads((out / name).read_text())
        print(name, [(k.get("rows"), k.get("graph"), round(k.get("device_us_per_step", 0), 1),
                      k.get("kernels_per_step")) for k in d.get("engine", {}).get("kernel_profile", [])])
if (out / "talker-norms-in-gemms.json").exists():
    d = json.loads((out / "talker-norms-in-gemms.json").read_text())
    print("talker", [(t["batch"], t["path"], round(t["ms_per_step"], 3)) for t in d["talker"]])
PY
