#!/usr/bin/env bash
# Device run, issue 36 (part two), one call: the overlay's q8kv8 patches (0007, 0009, 0011) on
# the H200, with the overlay installed as a user installs it (the wheel, its start-up hook), and
# fix 0011's series evidence (h200_born_q.sh). `bash .whl/h200_issue36_overlay.sh` with the
# .whl/ set of README.md (this project's wheel in it) beside this script; results in $OUT.
#  1. `sglang-overlay status`: every patch's state on this sglang 0.5.23.
#  2. docs/evidence/q8kv8/measure.py cuda on the installed wheel: overlay off
#     (SGLANG_OVERLAY_DISABLE=1), on, and on but for one patch (0007, 0009, 0011) at a time.
#  3. h200_born_q.sh: fix 0011's A/B from the series' trees, its CUDA mutants, measure.py on
#     both trees, est_time.
. "$(dirname "$0")/preamble.sh"
stub_kernels
R=$PWD
mkdir -p "$OUT"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
echo "== 1. sglang-overlay status"
(cd /tmp && python3 -m sglang_overlay status; echo "exit $?") 2>&1 | tee "$OUT/status.txt"
echo "== 2. measure.py cuda, installed wheel"
for disable in 1 "" 0007 0009 0011; do
  echo "-- SGLANG_OVERLAY_DISABLE=$disable"
  (cd /tmp && SGLANG_OVERLAY_DISABLE="$disable" python3 "$R/docs/evidence/q8kv8/measure.py" cuda 2>&1 \
    | grep -E "^cuda|Error" | sed -E 's# /[^:]*/sglang/srt/layers/attention/# #')
done | tee "$OUT/q8kv8-overlay-cuda.txt"
echo "== 3. fix 0011 from the series (h200_born_q.sh)"
OUT="$OUT/born-q" bash "$(dirname "$0")/h200_born_q.sh"
# What comes back from $OUT is a few files: the whole tree as one archive.
tar czf /tmp/issue36.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/issue36.tgz "$OUT/"
