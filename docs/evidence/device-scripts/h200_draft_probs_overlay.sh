#!/usr/bin/env bash
# Device run, issue 36: the DFlash dense draft-probability buffer (fix 0005, overlay patch 0005)
# on the H200 at the size the audit names: 64 -> 128 requests at gamma 15 and a 151,936-token
# vocabulary (a 1.09 GiB buffer), docs/evidence/draft-probs/measure.py cuda
# (max_memory_allocated). With this project's wheel installed as a user installs it: the overlay
# off (SGLANG_OVERLAY_DISABLE=1), on, and on but for patch 0005 (=0005); then on the series'
# trees, overlay off: sglang 0.5.23 as released and 0.5.23 + fix 0005 alone (the pull request).
# `bash .whl/h200_draft_probs_overlay.sh` with the .whl/ set of README.md (this project's wheel
# in it) beside this script; what it prints is the evidence (draft-probs/h200-0.5.23.txt).
. "$(dirname "$0")/preamble.sh"
stub_kernels
R=$PWD
measure() { (cd /tmp && python3 "$R/docs/evidence/draft-probs/measure.py" cuda 2>&1 | grep -E "^cuda|Error" \
  | sed -E 's#/[^ ]*/(sglang-0\.5\.23[^/]*)/python/#<\1>/#; s#/[^ ]*/site-packages/#<site-packages>/#'); }
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
echo "== sglang-overlay status"
(cd /tmp && python3 -m sglang_overlay status | grep -A1 "^overlay\|^0005"; echo "exit ${PIPESTATUS[0]}")
echo "== measure.py cuda, the installed wheel"
for disable in 1 "" 0005; do
  echo "-- SGLANG_OVERLAY_DISABLE=$disable"
  SGLANG_OVERLAY_DISABLE="$disable" measure
done
echo "== measure.py cuda, the series' trees first on PYTHONPATH (overlay off)"
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
U=/tmp/sglang-0.5.23 C=/tmp/sglang-0.5.23-fix-0005
python3 -m tools.series materialize "$U" > /dev/null && python3 -m tools.series materialize "$C" > /dev/null \
  && python3 -m tools.series apply --fix 0005 --to "$C" > /dev/null || exit 1
for tree in "$U" "$C"; do
  SGLANG_OVERLAY_DISABLE=1 PYTHONPATH="$tree/python" measure
done
