#!/usr/bin/env bash
# Device run, issue 33: every registered test of the series kills a named mutant of its fix, on
# the H200. python3 -m tools.registered_mutants applies each fix (patches 0001, 0003, 0005) to the installed
# sglang 0.5.23's file (checked against patches/BASE's sha256), makes each named mutant of it,
# and runs the fix's registered files of one backend against every variant in one process. It
# prints, per fix, the table mutant x test -> killed/survived (the fix's row: pass/fail), then
# one PROBLEM line per mutant that survives a test named for it, per test that kills nothing, or
# per test the fix does not pass, and "verdict: ok (BACKEND)" or "verdict: failed (BACKEND)".
# Then est_time's measurement: upstream's collect_tests + run_unittest_files (as
# test/run_suite.py drives them), SGLANG_IS_IN_CI=true, on each registered file, with the
# installed 0.5.23 (unmodified) and with 0.5.23 + the whole series (PYTHONPATH, a source tree).
WHEELS=".whl/sglang-0.5.23-*.whl"
. "$(dirname "$0")/preamble.sh"
R=$PWD
export PYTHONUNBUFFERED=1 SGLANG_OVERLAY_DISABLE=1
stub_kernels
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
for backend in cuda cpu; do
  echo "== python3 -m tools.registered_mutants --backend $backend"
  python3 -m tools.registered_mutants --backend "$backend" 2>&1 | tee "$OUT/mutants-$backend.txt" | grep -v "^  File\|^    "
  echo "exit ${PIPESTATUS[0]}"
done
# 0.5.23 + the whole series as a source tree: the installed package's files with the four
# patches applied (git apply, outside any repository).
C=/tmp/sglang-0.5.23-series
rm -rf "$C" && mkdir -p "$C/python" && cp -r "$SP/sglang" "$C/python/sglang"
(cd "$C" && for p in "$R"/patches/000[1-9]-*.patch; do git apply "$p" || exit 1; done) || exit 1
cat > /tmp/est_time.py <<'PY'
import sys, time
from sglang.test.ci.ci_register import collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
for reg in collect_tests(sys.argv[1:], sanity_check=True):
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}")
PY
F="test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py
test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py
test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py
test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_release_order.py"
echo "== est_time, unmodified (installed 0.5.23), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true python3 /tmp/est_time.py $F 2>&1 | grep "est_time="
echo "== est_time, 0.5.23 + the series ($C), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true PYTHONPATH="$C/python" python3 /tmp/est_time.py $F 2>&1 | grep "est_time="
