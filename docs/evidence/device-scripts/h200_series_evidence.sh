#!/usr/bin/env bash
# Device run (issues 33, 35, 36), one call: the series' evidence from its own trees on the H200.
#  1. est_time: upstream's collect_tests + run_unittest_files, SGLANG_IS_IN_CI=true, on the
#     CUDA files whose est_time was not measured here yet, base tree and base + the series.
#  2. the A/B at the cost of the work: `ci run` (its default preload) of fix 0001's CUDA file
#     against one `python3 FILE -v` of its slower (unmodified) side, alternated, 3 repeats.
#  3. in parallel: `python3 -m tools.series ab --fix N --backend cuda` for every fix (base
#     against base + that fix alone, as sglang's CI runs each file; the overlay off), and
#     `python3 -m tools.registered_mutants --backend cuda` (every fix's mutants).
# Run from the repository root as `bash .whl/h200_series_evidence.sh` with the .whl/ set of
# README.md beside this script (sglang 0.5.23 cp312 without .so files, its missing closure,
# stub_kernels.py); results in $OUT.
set -u
cd "$(dirname "$0")/.."
R=$PWD
export PYTHONUNBUFFERED=1 SGLANG_OVERLAY_DISABLE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v "^WARNING\|already" | tail -2
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp .whl/stub_kernels.py "$SP/" && echo "import stub_kernels" > "$SP/zz_stub_kernels.pth"
export STUB_KERNELS=sgl_kernel
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
python3 -c "import sglang.srt.speculative.dflash_worker_v2, sglang.srt.layers.attention.dsv4.sparse_prefill_utils" || exit 2
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
U=/tmp/sglang-0.5.23 C=/tmp/sglang-0.5.23-series
rm -rf "$U" "$C"
python3 -m tools.series materialize "$U" > /dev/null && python3 -m tools.series materialize "$C" > /dev/null \
  && python3 -m tools.series apply --to "$C" > /dev/null || { echo "materialize/apply failed"; exit 1; }

cat > /tmp/est_time.py <<'PY'
import sys, time
from sglang.test.ci.ci_register import collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
for reg in collect_tests(sys.argv[1:], sanity_check=True):
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}")
PY
EST_FILES=${EST_FILES:-test/registered/spec/dflash/test_dflash_draft_probs_peak.py}
echo "== 1. est_time, base (PYTHONPATH=$U/python), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true PYTHONPATH="$U/python" python3 /tmp/est_time.py $EST_FILES 2>&1 | grep "est_time="
echo "== 1. est_time, base + the series (PYTHONPATH=$C/python), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true PYTHONPATH="$C/python" python3 /tmp/est_time.py $EST_FILES 2>&1 | grep "est_time="

F=test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py
t() { /usr/bin/time -f "%e" -o /tmp/t.txt "$@" > /tmp/last.log 2>&1; local rc=$?; echo "$(tail -1 /tmp/t.txt) s rc=$rc"; }
echo "== 2. ci run (default preload) of $F, both sides, against python3 FILE -v of the base side"
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then order="file ab"; else order="ab file"; fi
  for k in $order; do
    case $k in
      file) echo "repeat $r: python3 FILE -v (base) $(cd /tmp && SGLANG_IS_IN_CI=true PYTHONPATH="$U/python" t python3 "$R/$F" -v)";;
      ab) echo "repeat $r: ci run $(t python3 -m ci run --out /tmp/ab$r --backend cuda --tests "$F" --unmodified-src "$U" --change-src "$C")"; grep -m1 "preload" /tmp/ab$r/report.md || true;;
    esac
  done
done

echo "== 3. series ab per fix (cuda), and the CUDA mutants, side by side"
FIXES=${FIXES:-0001 0003 0005}
for fix in $FIXES; do
  ( python3 -m tools.series ab --fix "$fix" --backend cuda --out "$OUT/fix-$fix" --no-check \
      > "$OUT/fix-$fix.log" 2>&1; echo "exit $?" >> "$OUT/fix-$fix.log" ) &
done
( python3 -m tools.registered_mutants --backend cuda > "$OUT/mutants-cuda.txt" 2>&1; echo "exit $?" >> "$OUT/mutants-cuda.txt" ) &
${EXTRA:-true}
wait
for fix in $FIXES; do echo "-- fix $fix"; tail -8 "$OUT/fix-$fix.log"; rm -rf "$OUT/fix-$fix/trees" "$OUT/fix-$fix"/*/pictures; done
echo "-- mutants"; grep -v "^  File\|^    \|Warning\|warn" "$OUT/mutants-cuda.txt" | tail -40
