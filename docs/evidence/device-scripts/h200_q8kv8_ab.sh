#!/usr/bin/env bash
# Device run, issue 36: fixes 0007 (DSA q8kv8 scratch) and 0009 (DSV4 q8kv8 q pad) on the H200,
# each CUDA file as sglang's CI runs it (SGLANG_IS_IN_CI=true), on sglang 0.5.23 as released and
# on 0.5.23 with patches 0007-0010 applied (a copy of the installed package, `patch -p2`), then
# docs/evidence/q8kv8/measure.py cuda on each (expected peak/new about 1.32 (DSA) and 1.50
# (DSV4) unmodified, 1.00 with the fixes). Needs the .whl/ set of README.md (sglang 0.5.23 cp312
# and its closure) at the repository root; no network, no overlay (neither side installs it).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 2
rm -rf /tmp/fix && mkdir -p /tmp/fix && cp -a /tmp/site/sglang /tmp/fix/sglang
for p in patches/0007-*.patch patches/0009-*.patch; do
  (cd /tmp/fix && patch -s -p2 < "$OLDPWD/$p") || exit 1
done
R=$PWD
T="test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py
test/registered/kernels/ops/attention/dsv4/test_dsv4_q8kv8_qpad_peak.py"
for side in unmodified:/tmp/site fixed:/tmp/fix:/tmp/site; do
  name=${side%%:*}; path=${side#*:}
  for f in $T; do
    echo "== $name: SGLANG_IS_IN_CI=true python3 $(basename "$f")"
    (cd /tmp && SGLANG_IS_IN_CI=true PYTHONPATH="$path" python3 "$R/$f" 2>&1 \
      | grep -E "^(Ran|OK|FAILED)|peaked at|Error")
  done
  echo "== $name: measure.py cuda"
  (cd /tmp && PYTHONPATH="$path" python3 "$R/docs/evidence/q8kv8/measure.py" cuda 2>&1 \
    | grep -E "^cuda|Error")
done
