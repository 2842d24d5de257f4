#!/usr/bin/env bash
# Device run, issue 28: fix 0003 (the DFlash fused KV workspaces) proved on the H200 as sglang's
# CI runs each file (SGLANG_IS_IN_CI=true, the bot's default). The sides are source trees made
# by the series tools, as `series pr-body` prints them: sglang 0.5.23 as released,
# and 0.5.23 with patches 0003-0004 applied alone (the fix's pull request). The overlay plays no
# part (off on both sides). Then the CUDA file by hand on each tree, as upstream's runner starts it.
. "$(dirname "$0")/preamble.sh"
R=$PWD
stub_kernels
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
command -v git > /dev/null || { echo "no git on this machine: the series tools need it to make the trees"; exit 2; }
# materialize reads the release's wheel from its cache: nothing can be downloaded here.
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
U=/tmp/sglang-0.5.23
C=/tmp/sglang-0.5.23-fix-0003
rm -rf "$U" "$C"
python3 -m series materialize "$U" && python3 -m series materialize "$C" \
  && python3 -m series apply --fix 0003 --to "$C" || exit 1
S=test/registered/unit/kernels/ops/speculative
T=$S/test_fused_kv_workspace_peak.py
echo "== ci run, cuda (as sglang's CI runs it)"
/usr/bin/time -f "%e s wall" python3 -m ci run --out "$OUT/cuda" --backend cuda --tests "$T" \
  --unmodified-src "$U" --change-src "$C" 2>&1 | tail -9
echo "== ci run, cpu, same host"
/usr/bin/time -f "%e s wall" python3 -m ci run --out "$OUT/cpu" --backend cpu \
  --tests "$S/test_fused_kv_workspace_release_order.py" --unmodified-src "$U" --change-src "$C" 2>&1 | tail -9
for tree in "$U" "$C"; do
  echo "== SGLANG_IS_IN_CI=true PYTHONPATH=$tree/python python3 $(basename "$T")"
  # the overlay installed above must play no part here either (it carries fix 0003 too)
  (cd /tmp && SGLANG_OVERLAY_DISABLE=1 SGLANG_IS_IN_CI=true PYTHONPATH="$tree/python" /usr/bin/time -f "%e s" python3 "$R/$T" 2>&1 \
    | grep -E "^(Ran|OK|FAILED)|peaked at|[0-9.]+ s$")
done
rm -rf "$OUT"/*/pictures
tar czf "$OUT/runs.tgz" -C "$OUT" cuda cpu && rm -rf "$OUT/cuda" "$OUT/cpu"
