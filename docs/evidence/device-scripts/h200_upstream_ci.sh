#!/usr/bin/env bash
# Device run, issue 25: the series' tests as sglang's CI runs them (SGLANG_IS_IN_CI=true, the
# bot's default), the CPU companion on the same host, the registered test of before issue 25
# (its state in setUp) to show what the retry masks, and the upstream runner's call by hand.
. "$(dirname "$0")/preamble.sh"
stub_kernels
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
echo "== ci run, cuda (default: as sglang's CI runs it)"
/usr/bin/time -f "%e s wall" python3 -m ci run --out "$OUT/cuda" --backend cuda --tests test/registered 2>&1 | tail -12
echo "== ci run, cpu, same host"
/usr/bin/time -f "%e s wall" python3 -m ci run --out "$OUT/cpu" --backend cpu --tests test/registered 2>&1 | tail -8
echo "== the registered test before issue 25 (state in setUp), as sglang's CI runs it"
cp .whl/old_setup_state.py test/registered/unit/layers/attention/test_dsv4_old_setup_state.py
grep -o 'test_[a-z0-9_]*fits_128_mib_budget\|test_replacement_peak_stays_below_100_mib' .whl/old_setup_state.py | sort -u \
  | sed 's#^#test/registered/unit/layers/attention/test_dsv4_old_setup_state.py::*.#' > "$OUT/old-regressions.txt"
python3 -m ci run --out "$OUT/old" --backend cuda --tests test/registered/unit/layers/attention/test_dsv4_old_setup_state.py --regressions "$OUT/old-regressions.txt" 2>&1 | tail -12
echo "== the same outside sglang's CI"
python3 -m ci run --out "$OUT/old-outside" --backend cuda --outside-upstream-ci --tests test/registered/unit/layers/attention/test_dsv4_old_setup_state.py --regressions "$OUT/old-regressions.txt" 2>&1 | tail -3
rm test/registered/unit/layers/attention/test_dsv4_old_setup_state.py
T=$PWD/test/registered/unit/layers/attention/test_dsv4_sparse_prefill_workspace.py
C=$PWD/test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py
for d in 1 0; do
  for f in "$T" "$C"; do
    echo "== SGLANG_IS_IN_CI=true SGLANG_OVERLAY_DISABLE=$d python3 $(basename "$f")"
    (cd /tmp && SGLANG_IS_IN_CI=true SGLANG_OVERLAY_DISABLE=$d /usr/bin/time -f "%e s" python3 "$f" 2>&1 | grep -E "^(Ran|OK|FAILED)|[0-9.]+ s$")
  done
done
rm -rf "$OUT"/*/pictures
tar czf "$OUT/runs.tgz" -C "$OUT" cuda cpu old old-outside && rm -rf "$OUT"/cuda "$OUT"/cpu "$OUT"/old "$OUT"/old-outside
