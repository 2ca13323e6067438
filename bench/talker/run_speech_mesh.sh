#!/usr/bin/env bash
# One GPU-machine call for the text->speech mesh at the released dims with random bf16 weights, routed as a trained
# model's routers route (bench/talker/bench_speech_mesh.py --routing balanced, its default): the thinker and the
# talker on one GPU, c = 1 / 8 / 32. Each level's summary is printed as it ends, so a call cut at its limit still
# shows the levels it finished.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [BENCH_S=540] [KV_GIB=3] [EXTRA="--concurrency 1 8"] \
#     bash bench/talker/run_speech_mesh.sh
# KV_GIB 3 leaves room on an 80 GB H100 beside ~60 GB of thinker and ~7 GB of talker weights (c = 32 holds ~2 GB).
source bench/device_setup.sh /tmp/speech-gpu
SECONDS=0
timeout "${BENCH_S:-540}" python3 bench/talker/bench_speech_mesh.py --random-weights --device cuda --dtype bfloat16 \
  --thinker-kv-gib "${KV_GIB:-3}" ${EXTRA:-} --out "$OUT/speech-mesh.json" 2>&1 | tee "$OUT/speech-mesh.log" \
  | grep -E '^\{|Error|error|Traceback' | cut -c1-600
echo "bench done at ${SECONDS}s"
pkill -f -- "-m (gateway|services\.)"; rm -rf /dev/shm/speech-random-*
[ -f "$OUT/speech-mesh.json" ] || exit 1
python3 - "$OUT/speech-mesh.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("routing", json.dumps(d.get("routing", {}))[:400])
for lv in d["levels"]:
    print({k: lv.get(k) for k in ("concurrency", "audio_s_per_s", "ttfa_ms_p50", "ttfa_ms_p99", "requests")})
PY
