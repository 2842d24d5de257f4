#!/usr/bin/env bash
# Device run (issue 28): the overlay's patch 0003 on the real FusedKVMaterializeHelper of
# sglang 0.5.23 on the H200 -> docs/evidence/h200-0.5.23-fused-kv/.
. "$(dirname "$0")/preamble.sh"
mkdir -p "$OUT/fused-kv"
{
  "$PY" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
  echo "== status (fresh process)"; (cd /tmp && "$PY" -m sglang_overlay status; echo "exit $?")
  echo "== status, SGLANG_OVERLAY_DISABLE=0003"
  (cd /tmp && SGLANG_OVERLAY_DISABLE=0003 "$PY" -m sglang_overlay status; echo "exit $?")
} > "$OUT/fused-kv/status.log" 2>&1
cat "$OUT/fused-kv/status.log"
# The three methods side by side in one process each (unmodified, overlay, released by hand).
for capacity in 4096 32768; do
  echo "== benchmark.fused_kv --device cuda --capacity $capacity"
  (cd /tmp && PYTHONPATH="$OLDPWD" "$PY" -m benchmark.fused_kv --device cuda --capacity $capacity) \
    > "$OUT/fused-kv/cuda-$capacity.json" 2> "$OUT/fused-kv/cuda-$capacity.err"
  echo "exit $?"; tail -c 1500 "$OUT/fused-kv/cuda-$capacity.json"
done
