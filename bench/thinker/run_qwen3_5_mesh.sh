#!/usr/bin/env bash
# One GPU-machine call for issue 18's gateway figures: a random Qwen3.5 9B at released dims (vision tower + hybrid
# LM, bench/thinker/qwen3_5_checkpoint.py) served by `omnimesh up` (vision and thinker on the GPU, bf16), then
# `omnimesh bench --addr`: one 640x480 image + a question, and a 60 s 2 fps 448x448 video + a question, at c = 16 /
# 32, 256 output tokens (EOS ignored); text at c = 1 / 32. vLLM on one H200 (the reference system's report): video
# 765 / 893 tok/s, image 2,260 / 3,658 tok/s at c = 16 / 32.
# Usage on the device, from the repo root, with the wheels of bench/gpu-wheels.txt in .whl/:
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> [MOE=1] [WORKLOADS="image video"] [CONCURRENCY="16 32"] [BENCH_FLAGS=...] [TEXT=0] \
#     [WORKLOAD_S=seconds each workload may take] [MPS=1: the stages' processes share the GPU through CUDA MPS] \
#     [KEEP_CKPT=1: reuse the checkpoint a previous run left, and leave it for the next (an A/B in one call)] \
#     bash bench/thinker/run_qwen3_5_mesh.sh
source bench/device_setup.sh /tmp/q35-mesh
SECONDS=0
CKPT=/dev/shm/qwen3.5-random
if [ "${KEEP_CKPT:-0}" = 1 ] && [ -f "$CKPT/config.json" ]; then echo "reusing $CKPT"
else python3 bench/thinker/qwen3_5_checkpoint.py --out "$CKPT" ${MOE:+--moe} | tee "$OUT/checkpoint.json" || exit 1; fi
echo "checkpoint written at ${SECONDS}s"
cat > /tmp/q35-mesh.yaml <<'YAML'
thinker:
  device: cuda
  dtype: bfloat16
  engine: {max_num_seqs: 32, max_batch_tokens: 8192, kv_cache_bytes: 21474836480, max_model_len: 32768}
vision: {enabled: true, device: cuda, dtype: bfloat16}
# 32 videos in flight hold ~4.6 GB of decoded frames (145 MB each), over the default 2 GiB
gateway: {max_media_bytes: 8589934592}
YAML
if [ "${MPS:-0}" = 1 ]; then  # without MPS the vision and thinker processes' kernels time-slice, never overlap
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && echo "MPS on" || { echo "MPS could not start: running without"; unset CUDA_MPS_PIPE_DIRECTORY; }
fi
# SM clock, power and temperature twice a second: a live 8,192-token step ran 2.3x the isolated one on the same
# H100 (552 vs 240 ms), its kernels themselves slower; throttling under sustained load is one suspect
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv,noheader -lms 500 > "$OUT/gpu-clocks.csv" 2>/dev/null &
CLOCKS=$!
python3 -m gateway.cli.main up --model "$CKPT" --port 50051 --config /tmp/q35-mesh.yaml > "$OUT/mesh.log" 2>&1 &
UP=$!
for _ in $(seq 600); do grep -q OMNIMESH_MESH "$OUT/mesh.log" && break; sleep 0.5; done
grep -q OMNIMESH_MESH "$OUT/mesh.log" || { tail -30 "$OUT/mesh.log"; kill -TERM $UP; exit 1; }
echo "mesh up at ${SECONDS}s"
for W in ${WORKLOADS:-image video}; do  # one file per workload, so a run cut short keeps the ones finished
  timeout "${WORKLOAD_S:-900}" python3 -m gateway.cli.main bench --addr 127.0.0.1:50051 --workloads "$W" \
    --concurrency ${CONCURRENCY:-16 32} --output-tokens 256 ${BENCH_FLAGS:-} --out "$OUT/qwen3.5-$W.json" 2>&1 | tail -6
  echo "$W done at ${SECONDS}s"
done
[ "${TEXT:-1}" = 1 ] && python3 -m gateway.cli.main bench --addr 127.0.0.1:50051 --workloads text --concurrency 1 32 --output-tokens 256 \
  --out "$OUT/qwen3.5-text.json" 2>&1 | tail -4
echo "text done at ${SECONDS}s"
# every stage's metrics after the run: the vision stage's encoder latency and queue time beside the thinker's step
# times say which stage bounds a workload (both share the GPU, time-sliced between their processes)
python3 - "$OUT" <<'PY'
import json, sys, urllib.request
mesh = json.loads(next(l for l in open(sys.argv[1] + "/mesh.log") if l.startswith("OMNIMESH_MESH")).split(" ", 1)[1])
for stage, ports in mesh.items():
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics_port']}/metrics", timeout=10) as r:
        open(f"{sys.argv[1]}/metrics-{stage}.txt", "wb").write(r.read())
PY
kill -TERM $UP; wait $UP
kill $CLOCKS
python3 - "$OUT/gpu-clocks.csv" <<'PY'
import statistics, sys
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") == 5]
busy = [r for r in rows if r[5].split()[0].isdigit() and int(r[5].split()[0]) >= 90]
if busy:
    sm = [float(r[1].split()[0]) for r in busy]
    watts = [float(r[3].split()[0]) for r in busy]
    hottest = max(int(r[4]) for r in busy)
    print(f"gpu while >= 90% busy ({len(busy)} samples): SM clock p50 {statistics.median(sm):.0f} MHz, "
          f"min {min(sm):.0f}; power p50 {statistics.median(watts):.0f} W; temperature max {hottest} C")
PY
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
[ "${KEEP_CKPT:-0}" = 1 ] || rm -rf "$CKPT"
