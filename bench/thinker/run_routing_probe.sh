#!/usr/bin/env bash
# One GPU-machine call: which workload routes random Thinker weights like a trained model (bench/thinker/routing_probe.py).
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [PROBE_ARGS="--concurrency 8 32"] bash bench/thinker/run_routing_probe.sh
source bench/device_setup.sh /tmp/routing-probe
timeout "${PROBE_S:-420}" python3 bench/thinker/routing_probe.py --out "$OUT/probe.json" ${PROBE_ARGS:-} 2>&1 \
  | tee "$OUT/probe.log" | grep -E "routing_probe|Error|error|Traceback" | tail -30
python3 - "$OUT/probe.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for v in d["variants"]:
    print(v["name"], {r: (round(x["measured"], 1), round(x["uniform"], 1)) for r, x in v["routing"]["experts_touched"].items()},
          "tokens/step", v["distinct_fed_tokens_per_step"])
    for lv in v["levels"]:
        s = lv["decode_steps"]
        print("   c", lv["concurrency"], "step", s.get("step_ms_p50"), "floor", s.get("hbm_floor_ms"), "roof", s.get("roofline_ratio_step"))
PY
