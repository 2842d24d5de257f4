#!/usr/bin/env bash
# Device run, issue 36 part two: fix 0011 (the DSA born-fp8 q buffer and its NaN sentinel) on the
# H200. `bash .whl/h200_born_q.sh` with the .whl/ set of README.md (this project's wheel in it)
# beside this script; results in $OUT (default out/h200-born-q).
#  1. `tools.series ab --fix 0011 --backend cuda`: sglang 0.5.23 against 0.5.23 + fix 0011 alone
#     (source trees, no overlay), the fix's CUDA file as sglang's CI runs it (SGLANG_IS_IN_CI=true);
#     expected: the two growth tests fail unmodified (peaks 108 and 48 MiB) and pass with the fix
#     (72 and 32 MiB); the call that fits allocates nothing on both.
#  2. the CUDA mutants of fix 0011 (`tools.registered_mutants --backend cuda --fix 0011`).
#  3. docs/evidence/q8kv8/measure.py cuda on both trees, and on the installed wheel with the
#     overlay on and with SGLANG_OVERLAY_DISABLE=0011 (expected born-q peak/new 1.50 unmodified,
#     1.00 fixed).
#  4. est_time of the CUDA file (upstream's collect_tests + run_unittest_files, CI mode), both trees.
. "$(dirname "$0")/preamble.sh"
stub_kernels
R=$PWD OUT=${OUT:-out/h200-born-q}
mkdir -p "$OUT"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
command -v git > /dev/null || { echo "no git here"; exit 2; }
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
U=/tmp/sglang-0.5.23 C=/tmp/sglang-0.5.23-fix-0011
rm -rf "$U" "$C"
python3 -m tools.series materialize "$U" > /dev/null && python3 -m tools.series materialize "$C" > /dev/null \
  && python3 -m tools.series apply --fix 0011 --to "$C" > /dev/null || { echo "materialize/apply failed"; exit 1; }
F=test/registered/kernels/ops/attention/test_dsa_q8kv8_born_q_peak.py

echo "== 1. tools.series ab --fix 0011 --backend cuda"
SGLANG_OVERLAY_DISABLE=1 python3 -m tools.series ab --fix 0011 --backend cuda --out "$OUT/fix-0011" \
  --no-check > "$OUT/fix-0011.log" 2>&1; echo "exit $?" >> "$OUT/fix-0011.log"
tail -8 "$OUT/fix-0011.log"
for side in "$U" "$C"; do
  echo "-- $(basename "$side"): SGLANG_IS_IN_CI=true python3 $F"
  (cd /tmp && SGLANG_OVERLAY_DISABLE=1 SGLANG_IS_IN_CI=true PYTHONPATH="$side/python" python3 "$R/$F" 2>&1 \
    | grep -E "^(Ran|OK|FAILED)|peaked at|Error")
done

echo "== 2. CUDA mutants of fix 0011"
SGLANG_OVERLAY_DISABLE=1 python3 -m tools.registered_mutants --backend cuda --fix 0011 2>&1 \
  | grep -v "Warning\|warn" | tee "$OUT/mutants-cuda.txt" | tail -16

echo "== 3. measure.py cuda"
for side in "$U" "$C"; do
  echo "-- $(basename "$side")"
  (cd /tmp && SGLANG_OVERLAY_DISABLE=1 PYTHONPATH="$side/python" python3 "$R/docs/evidence/q8kv8/measure.py" cuda 2>&1 \
    | grep -E "^cuda|Error")
done > "$OUT/q8kv8-cuda.txt"
for disable in "" 0011; do
  echo "-- installed wheel, overlay on, SGLANG_OVERLAY_DISABLE=$disable"
  (cd /tmp && SGLANG_OVERLAY_DISABLE="$disable" python3 "$R/docs/evidence/q8kv8/measure.py" cuda 2>&1 \
    | grep -E "^cuda|Error")
done >> "$OUT/q8kv8-cuda.txt"
cat "$OUT/q8kv8-cuda.txt"

echo "== 4. est_time of $F"
cat > /tmp/est_time.py <<'PY'
import sys, time
from sglang.test.ci.ci_register import collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
for reg in collect_tests(sys.argv[1:], sanity_check=True):
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}")
PY
for side in "$U" "$C"; do
  SGLANG_OVERLAY_DISABLE=1 SGLANG_IS_IN_CI=true PYTHONPATH="$side/python" python3 /tmp/est_time.py "$F" 2>&1 \
    | grep "est_time=" | sed "s#^#$(basename "$side") #"
done | tee "$OUT/est_time.txt"
rm -rf "$OUT/fix-0011/trees" "$OUT/fix-0011"/*/pictures
echo "== done at $SECONDS s"
