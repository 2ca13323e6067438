#!/usr/bin/env bash
# One GPU-machine call: the thinker through the gateway at c = 4 / 16 / 32 with its steps run ahead launched at once
# (the default) and with `engine.late_launch` (launched just before the running step ends, so arrivals join it),
# the same random checkpoint and prompts, one after the other. Writes $OUT/late-launch-{off,on}.json. Each client waits
# a uniform 0..THINK_MS before each request (default 40: about two steps), so arrivals spread over the steps: a
# closed loop's arrivals come right after the tokens that ended the last request, where late launch changes little
# (bench/thinker/late_launch_model.py).
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [EACH_S=270: the first run also compiles the kernels] [THINK_MS=40] \
#     [EXTRA="--concurrency 8 32 --mesh-log-level DEBUG"] bash bench/thinker/run_late_launch.sh
source bench/device_setup.sh /tmp/late-launch
SECONDS=0
for mode in off on; do
  timeout "${EACH_S:-270}" python3 bench/thinker/bench_thinker.py --random-weights --modes gateway --skip-hf \
    --concurrency 4 16 32 --long-prompt-tokens 0 --think-ms "${THINK_MS:-40}" $([ $mode = on ] && echo --late-launch) \
    ${EXTRA:-} \
    --out "$OUT/late-launch-$mode.json" 2>&1 | grep -E "gateway c=|Error|Traceback" | tail -8
  pkill -f -- "-m (gateway|services\.)"; rm -rf /dev/shm/thinker-random-*
  echo "late_launch $mode done at ${SECONDS}s"
done
python3 - "$OUT" <<'PY'
import json, sys
for mode in ("off", "on"):
    try:
        d = json.load(open(f"{sys.argv[1]}/late-launch-{mode}.json"))
    except (OSError, ValueError) as e:
        print(mode, "no result:", e)
        continue
    print("late_launch", mode, "device", d["device"], "commit", d["commit"][:10])
    for lv in d.get("gateway", {}).get("levels", []):
        th = lv.get("stages", {}).get("thinker", {})
        print(f"  c {lv['concurrency']:>2}: {lv['output_tok_s']:.1f} tok/s, ttft p50/p99 {lv['ttft_ms_p50']:.1f}/"
              f"{lv['ttft_ms_p99']:.1f} ms, tpot p50 {lv['tpot_ms_p50']:.2f} ms, step {th.get('step_ms_mean', 0):.2f}"
              f" ms, engine thread {dict((n, round(c, 2)) for n, _, c in th.get('cpu_threads', [])).get('engine')}")
PY
