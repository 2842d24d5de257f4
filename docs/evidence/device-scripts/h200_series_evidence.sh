#!/usr/bin/env bash
# Device run (issues 33, 35, 36), one call: the series' evidence from its own trees on the H200.
#  1. the A/B at the cost of the work: `ci run` (its default preload) of fix 0001's CUDA file,
#     base tree against base + the series, against one `python3 FILE -v` of its slower side
#     (the base), alternated, twice; alone on the machine.
#  2. side by side: `python3 -m tools.series ab --fix N --backend cuda` for every fix (base
#     against base + that fix alone, as sglang's CI runs each file; no overlay), the CUDA
#     mutants of every fix (`python3 -m tools.registered_mutants --backend cuda`, the per-ratio
#     cut's too), the q8kv8 peaks (docs/evidence/q8kv8/measure.py cuda) on both trees, and
#     est_time (upstream's collect_tests + run_unittest_files, SGLANG_IS_IN_CI=true) of the
#     CUDA files not measured here before, on both trees. Walls in 2 are of a shared machine.
# `bash .whl/h200_series_evidence.sh` with the .whl/ set of README.md beside this script; $OUT.
. "$(dirname "$0")/preamble.sh"
stub_kernels
R=$PWD
export SGLANG_OVERLAY_DISABLE=1
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
command -v git > /dev/null || { echo "no git here"; exit 2; }
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
U=/tmp/sglang-0.5.23 C=/tmp/sglang-0.5.23-series
rm -rf "$U" "$C"
python3 -m tools.series materialize "$U" > /dev/null && python3 -m tools.series materialize "$C" > /dev/null \
  && python3 -m tools.series apply --to "$C" > /dev/null || { echo "materialize/apply failed"; exit 1; }
echo "trees ready at $SECONDS s"

F=test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py
t() { /usr/bin/time -f "%e" -o /tmp/t.txt "$@" > /tmp/last.log 2>&1; local rc=$?; echo "$(tail -1 /tmp/t.txt) s rc=$rc"; }
echo "== 1. ci run of $F (both sides) against python3 FILE -v of the base side"
for r in 1 2; do
  for k in $([ $r = 1 ] && echo "file ab" || echo "ab file"); do
    case $k in
      file) echo "repeat $r: python3 FILE -v (base): $(cd /tmp && SGLANG_IS_IN_CI=true PYTHONPATH="$U/python" t python3 "$R/$F" -v)";;
      ab) echo "repeat $r: ci run: $(t python3 -m ci run --out /tmp/ab$r --backend cuda --tests "$F" --unmodified-src "$U" --change-src "$C")"
          grep -m2 -i "preload" /tmp/ab$r/report.md; tail -2 /tmp/last.log;;
    esac
  done
done
python3 -c "import json; d=json.load(open('/tmp/ab1/results.json')); print('preload:', json.dumps(d['environment'].get('preload'))[:400])"
echo "== 2. side by side (from $SECONDS s)"
for fix in 0001 0003 0005 0007 0009; do
  ( python3 -m tools.series ab --fix "$fix" --backend cuda --out "$OUT/fix-$fix" --no-check \
      > "$OUT/fix-$fix.log" 2>&1; echo "exit $?" >> "$OUT/fix-$fix.log" ) &
done
( python3 -m tools.registered_mutants --backend cuda > "$OUT/mutants-cuda.txt" 2>&1; echo "exit $?" >> "$OUT/mutants-cuda.txt" ) &
( for side in "$U" "$C"; do echo "== $side"; cd /tmp && PYTHONPATH="$side/python" python3 "$R/docs/evidence/q8kv8/measure.py" cuda 2>&1 | tail -4; done > "$OUT/q8kv8-cuda.txt" 2>&1 ) &
cat > /tmp/est_time.py <<'PY'
import sys, time
from sglang.test.ci.ci_register import collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
for reg in collect_tests(sys.argv[1:], sanity_check=True):
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}")
PY
for f in test/registered/spec/dflash/test_dflash_draft_probs_peak.py \
         test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py \
         test/registered/kernels/ops/attention/dsv4/test_dsv4_q8kv8_qpad_peak.py; do
  for side in "$U" "$C"; do
    ( SGLANG_IS_IN_CI=true PYTHONPATH="$side/python" python3 /tmp/est_time.py "$f" 2>&1 | grep "est_time=" | sed "s#^#$(basename "$side") #" >> "$OUT/est_time.txt" ) &
  done
done
# the per-ratio cut: 0.5.23 with the stored 02e8ed1b file, without and with the cut
DSV4=python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py
PU=/tmp/sglang-main-02e8ed1b PC=/tmp/sglang-main-02e8ed1b-cut
for t in "$PU" "$PC"; do
  rm -rf "$t" && mkdir -p "$t/python" && cp -r "$U/python/sglang" "$t/python/sglang"
  cp "$R/tests/fixtures/upstream_main/sparse_prefill_utils-02e8ed1b.py.txt" "$t/$DSV4"
done
(cd "$PC" && git apply "$R"/patches/cuts/per-ratio-workspace/patches/0001-*.patch) || echo "the cut does not apply"
PF=test/registered/kernels/ops/attention/dsv4/test_dsv4_per_ratio_workspace_replacement.py
for side in "$PU" "$PC"; do
  ( cd "$R/patches/cuts/per-ratio-workspace" && SGLANG_IS_IN_CI=true PYTHONPATH="$side/python" python3 /tmp/est_time.py "$PF" 2>&1 | grep "est_time=" | sed "s#^#$(basename "$side") #" >> "$OUT/est_time.txt" ) &
done
wait
echo "== done at $SECONDS s"
for fix in 0001 0003 0005 0007 0009; do echo "-- fix $fix"; tail -6 "$OUT/fix-$fix.log"; rm -rf "$OUT/fix-$fix/trees" "$OUT/fix-$fix"/*/pictures; done
echo "-- est_time"; cat "$OUT/est_time.txt"
echo "-- q8kv8"; cat "$OUT/q8kv8-cuda.txt"
echo "-- mutants"; grep -v "^  File\|^    \|Warning\|warn" "$OUT/mutants-cuda.txt" | tail -60
