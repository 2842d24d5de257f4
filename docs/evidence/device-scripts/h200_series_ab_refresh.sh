#!/usr/bin/env bash
# Device run: each fix's CUDA A/B again from the series' own trees for the fixes whose ids
# changed since their evidence was made (0005, 0009: est_time raised; 0007: a CPU test added),
# so that `python -m tools.series pr-body --results docs/evidence/fix-N/cuda --fix N` renders
# them. Side by side; `bash .whl/h200_series_ab_refresh.sh`, the .whl/ set of README.md; $OUT.
. "$(dirname "$0")/preamble.sh"
stub_kernels
export SGLANG_OVERLAY_DISABLE=1
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
python3 -m tools.series materialize /tmp/warm > /dev/null || exit 1  # the cached base, once
for fix in ${FIXES:-0005 0007 0009}; do
  ( python3 -m tools.series ab --fix "$fix" --backend cuda --out "$OUT/fix-$fix" --no-check \
      > "$OUT/fix-$fix.log" 2>&1; echo "exit $?" >> "$OUT/fix-$fix.log" ) &
done
wait
for fix in ${FIXES:-0005 0007 0009}; do
  echo "-- fix $fix"; tail -8 "$OUT/fix-$fix.log"; rm -rf "$OUT/fix-$fix/trees" "$OUT/fix-$fix"/*/pictures
done
tar czf /tmp/refresh.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/refresh.tgz "$OUT/"
