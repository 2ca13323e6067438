#!/usr/bin/env bash
# The whole mesh with every stage on CUDA in bf16 on the demo checkpoint: text, image and audio chats.
OUT=$1
cat > /tmp/gpu_mesh.yaml <<'YAML'
thinker: {device: cuda, dtype: bfloat16}
vision: {enabled: true, device: cuda, dtype: bfloat16}
audio: {enabled: true, device: cuda, dtype: bfloat16}
talker: {enabled: true, device: cuda, dtype: bfloat16}
YAML
python3 -m gateway.cli.main up --model demo --port 50051 --config /tmp/gpu_mesh.yaml > "$OUT/mesh_up.log" 2>&1 &
UP=$!
for _ in $(seq 180); do grep -q OMNIMESH_MESH "$OUT/mesh_up.log" && break; sleep 0.5; done
python3 - <<'PY'
from pathlib import Path
from tests.integration.media_files import png, wav
Path("/tmp/a.png").write_bytes(png()); Path("/tmp/a.wav").write_bytes(wav())
PY
for args in "Hello" "--image /tmp/a.png Describe" "--audio /tmp/a.wav Transcribe"; do
  echo "== chat $args"
  timeout 60 python3 -m gateway.cli.main chat --json --greedy --max-tokens 16 $args | tail -3
done | tee "$OUT/mesh_chats.log"
kill -TERM $UP; wait $UP; echo "up exit $?"
tail -5 "$OUT/mesh_up.log"
