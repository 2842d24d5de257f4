#!/usr/bin/env bash
# Device run, issue 33 deliverable 5: fix 0001's cut for upstream main's per-ratio workspace
# (patches/cuts/per-ratio-workspace/) on the H200. python3 -m tools.registered_mutants --fix
# 0001-per-ratio applies the cut's patch to the stored upstream file at 02e8ed1b
# (tests/fixtures/upstream_main/, checked against the cut's BASE), makes each named mutant of
# it (release-first-alone among them), loads each in place of the installed module and runs the
# cut's registered files of one backend against every variant: the table mutant x test ->
# killed/survived, PROBLEM lines, "verdict: ok|failed (BACKEND)". Then est_time's measurement
# as h200_registered_mutants.sh makes it: sglang's collect_tests + run_unittest_files,
# SGLANG_IS_IN_CI=true, on the cut's two files, against 0.5.23 with the 02e8ed1b file
# (unmodified) and with the cut applied to it (changed), both as source trees.
set -u
cd "$(dirname "$0")/.."
R=$PWD
export PYTHONUNBUFFERED=1 SGLANG_OVERLAY_DISABLE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/sglang-0.5.23-*.whl 2>&1 | tail -2
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp .whl/stub_kernels.py "$SP/" && echo "import stub_kernels" > "$SP/zz_stub_kernels.pth"
export STUB_KERNELS=sgl_kernel
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
for backend in cuda cpu; do
  echo "== python3 -m tools.registered_mutants --backend $backend --fix 0001-per-ratio"
  python3 -m tools.registered_mutants --backend "$backend" --fix 0001-per-ratio 2>&1 | tee "$OUT/per-ratio-mutants-$backend.txt" | grep -v "^  File\|^    "
  echo "exit ${PIPESTATUS[0]}"
done
DSV4=python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py
U=/tmp/sglang-main-02e8ed1b C=/tmp/sglang-main-02e8ed1b-cut
for t in "$U" "$C"; do
  rm -rf "$t" && mkdir -p "$t/python" && cp -r "$SP/sglang" "$t/python/sglang"
  cp "$R/tests/fixtures/upstream_main/sparse_prefill_utils-02e8ed1b.py.txt" "$t/$DSV4"
done
(cd "$C" && git apply "$R"/patches/cuts/per-ratio-workspace/patches/0001-*.patch) || exit 1
cat > /tmp/est_time.py <<'PY'
import sys, time
from sglang.test.ci.ci_register import collect_tests
from sglang.test.ci.ci_utils import run_unittest_files
for reg in collect_tests(sys.argv[1:], sanity_check=True):
    start = time.monotonic()
    code = run_unittest_files([reg], continue_on_error=True)
    print(f"{reg.filename} est_time={reg.est_time:g} wall={time.monotonic() - start:.1f}s rc={code}")
PY
cd "$R/patches/cuts/per-ratio-workspace"
F="test/registered/kernels/ops/attention/dsv4/test_dsv4_per_ratio_workspace_replacement.py
test/registered/unit/layers/attention/test_dsv4_per_ratio_workspace_release_order.py"
echo "== est_time, unmodified (0.5.23 + the 02e8ed1b file, $U), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true PYTHONPATH="$U/python" python3 /tmp/est_time.py $F 2>&1 | grep "est_time="
echo "== est_time, + the cut ($C), SGLANG_IS_IN_CI=true"
SGLANG_IS_IN_CI=true PYTHONPATH="$C/python" python3 /tmp/est_time.py $F 2>&1 | grep "est_time="
