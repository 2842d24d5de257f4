#!/usr/bin/env bash
# Device run, one call: the series' CUDA evidence on the H200.
#  c. est_time: upstream's collect_tests + run_unittest_files (SGLANG_IS_IN_CI=true) of each
#     CUDA file of test/registered on 0.5.23 + the series (a source tree), 2 at a time, alone.
#  then side by side:
#  a. `ci run --backend cuda --tests test/registered` with this project's wheel installed: the
#     installed 0.5.23 with the overlay off (unmodified) against on (change): every regression.
#  b. each fix's test files with that fix's overlay patch off on the change side: each fails.
#  d. the CUDA mutants: tests/test_registered_mutants.py (its table is tests/registered_mutants.py).
#  e. `tools.series ab --fix N --backend cuda` for every fix: plain sides (a venv without this
#     project), 0.5.23 against 0.5.23 + that fix alone.
# `bash .whl/h200_plain_evidence.sh` with the .whl/ set of README.md and this project's wheel;
# $OUT/summary.txt and $OUT/evidence.tgz come back. PARTS picks the parts (default: all five).
. "$(dirname "$0")/preamble.sh"
stub_kernels
S=/tmp/ev/sglang-0.5.23-series W=/tmp/ev FIXES=${FIXES:-0001 0003 0005 0007 0009 0011}
PARTS=" ${PARTS:-a b c d e} "
part() { [[ $PARTS == *" $1 "* ]]; }
rm -rf "$W" && mkdir -p "$W"
set -o pipefail
main() {
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
command -v git > /dev/null || { echo "no git here"; exit 2; }
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/

python3 -m tools.series materialize "$S" > /dev/null && python3 -m tools.series apply --to "$S" > /dev/null \
  || { echo "materialize/apply failed"; exit 1; }
echo "series tree ready at $SECONDS s"
cat > "$W/cuda_files.py" <<'PY'
import glob, sys, time
from sglang.test.ci.ci_register import HWBackend, collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
files = sys.argv[1:] or sorted(glob.glob("test/registered/**/test_*.py", recursive=True))
for reg in collect_tests(files, sanity_check=True):
    if reg.backend != HWBackend.CUDA:
        continue
    if not sys.argv[1:]:  # list them
        print(reg.filename)
        continue
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}", flush=True)
PY
SGLANG_OVERLAY_DISABLE=1 python3 "$W/cuda_files.py" > "$W/cuda_files.txt" || exit 1
echo "== c. est_time on 0.5.23 + the series, 2 at a time"; cat "$W/cuda_files.txt"
! part c || SGLANG_OVERLAY_DISABLE=1 SGLANG_IS_IN_CI=true PYTHONPATH="$S/python" \
  xargs -P 2 -n 1 python3 "$W/cuda_files.py" < "$W/cuda_files.txt" > "$W/est_time.log" 2>&1
grep "est_time=" "$W/est_time.log"
echo "== side by side from $SECONDS s"
part a && ( timeout ${LIMIT:-330} python3 -m ci run --out "$W/a" --backend cuda --tests test/registered --jobs 4 \
    --unmodified-env SGLANG_OVERLAY_DISABLE=1 > "$W/a.log" 2>&1; echo "exit $?" >> "$W/a.log" ) &
tests_of() {  # the test files fix $1 adds
  python3 -c "from tools.series import seriesdir as s; print(*sorted(p for p, new in s.load().fix('$1').touched_files().items() if new))"
}
part b && for fix in $FIXES; do
  # shellcheck disable=SC2046  # the files, one word each
  ( timeout ${LIMIT:-330} python3 -m ci run --out "$W/b-$fix" --backend cuda --tests $(tests_of "$fix") \
      --unmodified-env SGLANG_OVERLAY_DISABLE=1 --change-env SGLANG_OVERLAY_DISABLE="$fix" \
      > "$W/b-$fix.log" 2>&1; echo "exit $?" >> "$W/b-$fix.log" ) &
done
part d && ( SGLANG_OVERLAY_DISABLE=1 timeout ${LIMIT:-330} python3 -m pytest -v -p no:xdist -p no:cacheprovider \
    tests/test_registered_mutants.py > "$W/mutants-pytest.txt" 2>&1; echo "exit $?" >> "$W/mutants-pytest.txt" ) &
part e && for fix in $FIXES; do
  ( timeout ${LIMIT:-330} python3 -m tools.series ab --fix "$fix" --backend cuda --out "$W/fix-$fix" --no-check \
      > "$W/fix-$fix.log" 2>&1; echo "exit $?" >> "$W/fix-$fix.log" ) &
done
wait
echo "== done at $SECONDS s"
echo "-- a"; grep -v "^\[" "$W/a.log" | tail -40
for fix in $FIXES; do echo "-- b $fix"; grep -v "^\[\|^preservation\|^regression" "$W/b-$fix.log" | tail -5; done
echo "-- d"; tail -60 "$W/mutants-pytest.txt"
for fix in $FIXES; do echo "-- e $fix"; grep -v "^regression\|^preservation" "$W/fix-$fix.log" | tail -8; done
}
main 2>&1 | tee "$OUT/summary.txt"
rm -rf "$S" "$W"/fix-*/trees "$W"/*/pictures "$W"/fix-*/*/pictures "$W"/*/sides
tar czf "$OUT/evidence.tgz" -C "$W" .
