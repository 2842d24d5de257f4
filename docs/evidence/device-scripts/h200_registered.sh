#!/usr/bin/env bash
# Device run: the registered test as upstream's runner starts it (both sides), ci run's A/B on
# CUDA, and the proof benchmark (bare import vs python FILE vs ci run, alternating).
. "$(dirname "$0")/preamble.sh"
# sglang's test utilities import sgl_kernel by name on CUDA; the image has none for this torch
# and it is too large to carry: a stand-in whose every attribute raises if called.
stub_kernels
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
F=test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py
echo "== python FILE -v, change"; /usr/bin/time -f "%e s wall" python3 $F -v > $OUT/file-change.log 2>&1; tail -4 $OUT/file-change.log
echo "== python FILE -v, unmodified"; SGLANG_OVERLAY_DISABLE=1 /usr/bin/time -f "%e s wall" python3 $F -v > $OUT/file-unmodified.log 2>&1; grep -E "AssertionError|^Ran|FAILED|OK|wall" $OUT/file-unmodified.log
echo "== ci run"; /usr/bin/time -f "%e s wall" python3 -m ci run --out $OUT/ab --backend cuda 2>&1 | tail -14
echo "== proof benchmark"; python3 -m benchmark --parts proof --device cuda 2>&1 | tail -6
cp benchmark/results/nvidia-h200.json $OUT/ 2>/dev/null
rm -rf $OUT/ab/logs
ls $OUT $OUT/ab
