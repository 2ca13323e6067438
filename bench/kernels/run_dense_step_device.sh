#!/usr/bin/env bash
# One GPU-machine call for the persistent code-predictor step (runtime/kernels/dense_step.py): its GPU tests, the
# tiling sweep (persistent against one launch per phase) with each phase's time, then the talker frame with the
# predictor layer by layer ("graphs", the default) and persistent ("graphs-dense"), balanced routing.
#   OUT=/some/dir OMNIMESH_COMMIT=<sha> bash bench/kernels/run_dense_step_device.sh
source bench/device_setup.sh /tmp/dense-gpu > /dev/null
timeout 200 python3 -m pytest -q -p no:randomly -p no:cacheprovider tests/unit/kernels/test_kernel_dense_step_gpu.py \
  tests/unit/talker/test_frame_step.py 2>&1 | tail -4
timeout 150 python3 bench/kernels/bench_dense_step.py --sweep --profile --rows 1 16 --out $OUT/dense-step-sweep.json \
  2>&1 | grep -v Warning | tail -40
timeout 220 python3 bench/talker/bench_talker.py --frames-only --batches 1 8 16 --paths graphs graphs-dense \
  --out $OUT/talker-dense.json > $OUT/talker-dense.log 2>&1; echo "talker rc $?"
python3 -c "import json; d = json.load(open('$OUT/talker-dense.json')); [print(r) for r in d['talker']]" 2>&1 | tail -8
tail -3 $OUT/talker-dense.log | cut -c1-300
