#!/usr/bin/env bash
# Device run, issue 36: fix 0005 (DFlash's dense draft-probability buffer) on the H200, as
# sglang's CI runs each file (SGLANG_IS_IN_CI=true). Run from the repository root on a machine
# with python3 + torch CUDA + the sglang 0.5.23 wheel (--no-deps) and git. Sides: 0.5.23 as
# released and 0.5.23 + patches 0005-0006 alone (the fix's pull request), both source trees,
# overlay off on both. Prints: the import check, ci run's summary (cuda, then cpu on the same
# host), each tree's CUDA file by hand (Ran/OK/FAILED and "peaked at" lines), and the 64 -> 128
# request measurement at gamma 15, vocab 151,936 on each tree ("cuda ...: old ... new ... peak
# ... peak/new ..."; expected about 1.50 unmodified and 1.00 with the fix).
set -u
export PYTHONUNBUFFERED=1 SGLANG_OVERLAY_DISABLE=1
OUT=${OUT:-/tmp/out-draft-probs}
mkdir -p "$OUT"
python3 -c "import sglang.srt.speculative.dflash_worker_v2" 2>/dev/null || {
  echo "sglang.srt.speculative.dflash_worker_v2 does not import here (its closure: openai, fastapi, uvicorn, einops, ...): install them first"; exit 2; }
U=/tmp/sglang-0.5.23
C=/tmp/sglang-0.5.23-fix-0005
rm -rf "$U" "$C"
python3 -m tools.series materialize "$U" && python3 -m tools.series materialize "$C" \
  && python3 -m tools.series apply --fix 0005 --to "$C" || exit 1
S=test/registered/unit/speculative
T=$S/test_dflash_draft_probs_peak.py
echo "== ci run, cuda"
python3 -m ci run --out "$OUT/cuda" --backend cuda --tests "$T" \
  --unmodified-src "$U" --change-src "$C" 2>&1 | tail -9
echo "== ci run, cpu, same host"
python3 -m ci run --out "$OUT/cpu" --backend cpu --tests "$S/test_dflash_draft_probs_release_order.py" \
  --unmodified-src "$U" --change-src "$C" 2>&1 | tail -9
R=$PWD
for tree in "$U" "$C"; do
  echo "== SGLANG_IS_IN_CI=true PYTHONPATH=$tree/python python3 $(basename "$T")"
  (cd /tmp && SGLANG_IS_IN_CI=true PYTHONPATH="$tree/python" python3 "$R/$T" 2>&1 \
    | grep -E "^(Ran|OK|FAILED)|peaked at")
  (cd /tmp && PYTHONPATH="$tree/python" python3 "$R/docs/evidence/draft-probs/measure.py" cuda 2>&1 | tail -1)
done
