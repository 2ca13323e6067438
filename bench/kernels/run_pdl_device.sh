#!/usr/bin/env bash
# One GPU-machine call for programmatic dependent launch (runtime/kernels/pdl.py): its GPU test, then the Qwen3-ASR
# decode graphs (1 and 48 rows: kernel time and replay time, gaps included), mixed steps and the talker frame,
# without and with PDL.
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [TALKER=0: not the talker] bash bench/kernels/run_pdl_device.sh
source bench/device_setup.sh /tmp/pdl-gpu > /dev/null
timeout 150 python3 -m pytest -q -p no:randomly -p no:cacheprovider tests/unit/kernels/test_kernel_pdl_gpu.py 2>&1 | tail -3
for P in 0 1; do OMNIMESH_PDL=$P timeout 170 python3 bench/thinker/profile_lm.py --family qwen3-asr-1.7b --prompt-tokens 65 --media --rows 48 --mixed-rows 12 47 --out $OUT/asr-profile-pdl$P.json > $OUT/pdl$P.log 2>&1; echo "pdl $P rc $?"; tail -3 $OUT/pdl$P.log | cut -c1-200; done
python3 - <<'PY'
import json, os
for P in (0, 1):
    f = os.environ["OUT"] + f"/asr-profile-pdl{P}.json"
    if not os.path.exists(f): continue
    d = json.load(open(f))
    print("PDL", P, "prefill", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in d["prefill_step_ms"].items() if k != "warm_ups"})
    for dec in d["decode"]:
        print("  decode rows", dec["rows"], "kernels us", round(dec["device_us_per_step"], 1), "replay us", round(dec.get("replay_us_per_step") or 0, 1), "launches", dec["kernels_per_step"])
    for m in d.get("mixed", []):
        print("  mixed rows", m["decode_rows"], "decode wall", round(m["decode_wall_ms"], 3), "with prefill wall", round(m["with_prefill_wall_ms"], 3), "eager", m["eager_steps"])
        for key in ("decode_profiled", "with_prefill_profiled"):
            p = m[key]; print("    ", key, "wall", round(p["wall_ms"], 3), "device", round(p["device_ms"], 3), "launches", p["launches"])
            for k in p["kernels"][:6]: print("        ", k["name"][:60], k["us"], k["calls"])
            for k in p["host_ops"][:5]: print("        host", k["name"][:50], k["us"], k["calls"])
PY
# the talker's frame (code predictor + talker step + picks), 1 and 8 rows, graphs only
[ "${TALKER:-1}" = 0 ] && exit 0
for P in 0 1; do
  OMNIMESH_PDL=$P timeout 170 python3 bench/talker/bench_talker.py --batches 1 8 --paths graphs \
    --out $OUT/talker-pdl$P.json > $OUT/talker-pdl$P.log 2>&1; echo "talker pdl $P rc $?"
  python3 -c "import json; d = json.load(open('$OUT/talker-pdl$P.json')); print([{k: v for k, v in r.items() if 'ms' in k or k in ('batch', 'rows')} for r in d['talker']])"
done
