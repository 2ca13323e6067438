#!/usr/bin/env bash
# One GPU-machine call that decides whether the decode norms belong inside the skinny GEMMs (RowNorm; bench/kernels/
# NOTES.md run 9): their GPU tests, then on one host Qwen3-ASR's one-row decode graph without and with
# (profile_lm.py) and the talker frame with the code predictor without and with (bench_talker.py).
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir bash bench/kernels/run_norms_in_gemms.sh
source bench/device_setup.sh /tmp/norms-in-gemms
SECONDS=0
timeout "${TEST_S:-240}" python3 -m pytest -q -m gpu -rfE -p no:cacheprovider \
  tests/unit/kernels/test_kernel_skinny_gemm_gpu.py \
  tests/parity/asr/test_asr_gpu.py tests/parity/talker/test_talker_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
echo "tests done at ${SECONDS}s"
for flag in "" --norms-in-gemms; do
  timeout "${PROFILE_S:-150}" python3 bench/thinker/profile_lm.py --family qwen3-asr-1.7b --prompt-tokens 65 --rows 32 \
    $flag --out "$OUT/asr-lm-profile${flag:+-norms-in-gemms}.json" > "$OUT/asr-lm-profile${flag}.log" 2>&1
  echo "profile_lm ${flag:-(norm launches)} done at ${SECONDS}s (rc $?)"
done
timeout "${TALKER_S:-200}" python3 bench/talker/bench_talker.py --batches 1 8 --paths graphs graphs-norms-in-gemms \
  --out "$OUT/talker-norms-in-gemms.json" > "$OUT/talker.log" 2>&1
echo "bench_talker done at ${SECONDS}s (rc $?)"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("asr-lm-profile.json", "asr-lm-profile-norms-in-gemms.json"):
    if (out / name).exists():
        d = json.loads((out / name).read_text())
        print(name, [(s["rows"], round(s["device_us_per_step"], 1), s["kernels_per_step"]) for s in d["decode"]])
if (out / "talker-norms-in-gemms.json").exists():
    d = json.loads((out / "talker-norms-in-gemms.json").read_text())
    print("talker", [(t["batch"], t["path"], round(t["ms_per_step"], 3)) for t in d["talker"]])
PY
