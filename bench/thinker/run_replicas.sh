#!/usr/bin/env bash
# One GPU-machine call for issue 19: two released-size Thinker replicas on one H200 (~59 GiB of weights each, 6 GiB
# of KV each), the multi-turn workload routed prefix_aware against round_robin at c = 16 and 32
# (bench/thinker/bench_replicas.py). Writes $OUT/thinker-replicas.json (+ .mesh.log) and prints a summary.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [BENCH_S=560] [EXTRA="--conversations-per-stream 3"] \
#     bash bench/thinker/run_replicas.sh
# On an H100 (80 GB) two 48-layer replicas do not fit: EXTRA="--layers 16" runs a third of the decoder each.
source bench/device_setup.sh /tmp/replicas-gpu
SECONDS=0
# SIGTERM at the limit: the bench stops the mesh and saves the levels it finished; the replicas' processes and the
# checkpoint in /dev/shm are cleaned up below whatever happened
timeout "${BENCH_S:-560}" python3 bench/thinker/bench_replicas.py --random-weights --devices cuda:0 cuda:0 \
  --kv-cache-gib 6 ${EXTRA:-} --out "$OUT/thinker-replicas.json" > "$OUT/thinker-replicas.log" 2>&1
rc=$?
pkill -f -- "-m (gateway|services\.)" ; rm -rf /dev/shm/thinker-random-*
echo "bench done at ${SECONDS}s (rc $rc)"
tail -8 "$OUT/thinker-replicas.log"
[ -f "$OUT/thinker-replicas.json" ] || exit 1
python3 - "$OUT/thinker-replicas.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda v, n=1: None if v is None else round(v, n)
print("device", d["device"], "commit", d["commit"][:12], "layers", d.get("decoder_layers"), "startup",
      r(d.get("startup_s")), "s")
for lv in d["levels"]:
    for policy in ("round_robin", "prefix_aware"):
        p = lv.get(policy, {})
        print(f"  c {lv['concurrency']:>3} {policy:>12}: {r(p.get('output_tok_s'))} tok/s, ttft p50/p99"
              f" {r(p.get('ttft_ms_p50'))}/{r(p.get('ttft_ms_p99'))} ms, hit rate {r(p.get('prefix_hit_rate'), 3)},"
              f" routed {p.get('routed')}")
    print(f"        ttft p50 reduction {r(lv.get('ttft_p50_reduction'), 3)}, tok/s ratio {r(lv.get('tok_s_ratio'), 3)}")
PY
