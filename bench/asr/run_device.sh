#!/usr/bin/env bash
# One GPU-machine call for issue 24: Qwen3-ASR Transcribe end to end (bench/asr/bench_transcribe.py) on one H200 at
# the released 1.7B dims with random bf16 weights; closed loop of distinct 4 s clips x 40 tokens (EOS ignored) at
# c = 1 / 16 / 32 / 64. Writes $OUT/asr-transcribe-h200.json (+ .mesh.log, the bench's log) and prints a summary.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [LEVELS="1 16 32 64"] [EXTRA="--no-graphs ..."] [NAME=asr-transcribe-h200] \
#     bash bench/asr/run_device.sh
# NAME names the result files, so one call can run several settings (e.g. EXTRA="--gateway-replicas 2 --channels 64")
source bench/device_setup.sh /tmp/asr-gpu
NAME=${NAME:-asr-transcribe-h200}
SECONDS=0
# SIGTERM at the limit: the bench stops the mesh, saves what it measured and removes its checkpoint before exiting
timeout "${BENCH_S:-500}" python3 bench/asr/bench_transcribe.py --concurrency ${LEVELS:-1 16 32 64} ${EXTRA:-} \
  --out "$OUT/$NAME.json" > "$OUT/$NAME.log" 2>&1
rc=$?
echo "bench done at ${SECONDS}s (rc $rc)"
[ "$rc" -ne 0 ] && tail -25 "$OUT/$NAME.log"
[ -f "$OUT/$NAME.json" ] || exit 1
python3 - "$OUT/$NAME.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda v, n=1: None if v is None else round(v, n)
ck = {k: r(v) for k, v in d.get("checkpoint", {}).items() if k != "dir"}
print("device", d["device"], "commit", d["commit"][:12], "checkpoint", ck, "mesh up", r(d.get("mesh_up_s")), "s")
print("initial warm-up", d.get("initial_warmup"))
for lv in d["levels"]:
    st = lv.get("stages_whole_level", {})
    th = st.get("thinker", {})
    lat = "/".join(str(r(lv.get(f"latency_ms_p{q}"))) for q in (50, 95, 99))
    loops = {s: r(v.get("cpu_event_loop"), 2) for s, v in st.items()}
    print(f"  c {lv['concurrency']:>3}: {r(lv.get('requests_per_s'))} req/s, {r(lv.get('output_tok_s'), 0)} tok/s,"
          f" latency p50/p95/p99 {lat} ms, ttft p50 {r(lv.get('ttft_ms_p50'))} ms,"
          f" tokens {lv.get('tokens_per_request')}, prompt {lv.get('prompt_tokens')},"
          f" thinker step {r(th.get('step_ms_mean'), 2)} ms x {r(th.get('rows_per_batch'))} rows,"
          f" event loops busy {loops}")
    au, gw = st.get("audio", {}), st.get("gateway") or st.get("gateway-0", {})
    ms = {k: r(v, 2) for k, v in gw.get("edge_ms_per_request", {}).items()}
    print(f"         queue ms audio/thinker {r(au.get('queue_ms_mean'))}/{r(th.get('queue_ms_mean'))},"
          f" audio forward {r(au.get('encode_ms_mean'))} ms x {r(au.get('items_per_encode'))} clips,"
          f" gateway ttft {r(gw.get('ttft_ms_mean'))} ms, gateway edges ms a request"
          f" {ms} ")
    phases = lv.get("gateway_timing_ms", {})
    print("         gateway ms by phase p50/p99", {k: (r(v["p50"]), r(v["p99"])) for k, v in phases.items()})
    slow = sorted((x for x in lv.get("raw", []) if x.get("gateway_timing_ms")), key=lambda x: -(x["ttft_ms"] or 0))
    for x in slow[:3]:  # the slowest first tokens, phase by phase
        print(f"         ttft {r(x['ttft_ms'])} ms:", {k: r(v) for k, v in x["gateway_timing_ms"].items()})
print("summary", json.dumps(d["summary"]))
if "error" in d:
    print("error", d["error"][-1500:])
PY
