#!/usr/bin/env bash
# Device run (issue 26, after issue 28 gave the series a second fix): the A/B of every CUDA file
# the series adds (fix 0001's and fix 0003's), both sides, --preload torch, as sglang's CI runs
# it, with one process per file and side at once (--jobs 4), against one
# `SGLANG_IS_IN_CI=true python3 FILE -v` of fix 0001's CUDA file (the change side, as in
# h200_preload.sh), alternated, $REPEATS repeats.
. "$(dirname "$0")/preamble.sh"
REPEATS=${REPEATS:-3}
stub_kernels
F=$PWD/test/registered/unit/layers/attention/test_dsv4_sparse_prefill_workspace.py
python3 -c "import sglang.srt.layers.attention.dsv4.sparse_prefill_utils, sglang.kernels.ops.speculative.fused_kv_materialize" >/dev/null 2>&1
python3 -c "import ci.__main__, abtest.run, report.render, matplotlib.pyplot" >/dev/null 2>&1
t() { /usr/bin/time -f "%e" -o "$OUT/t.txt" "$@" > "$OUT/last.log" 2>&1; local rc=$?; echo "$(tail -1 "$OUT/t.txt") s rc=$rc"; }
for r in $(seq "$REPEATS"); do
  echo "repeat $r"
  order="file ab"; [ $((r % 2)) = 0 ] && order="ab file"
  for k in $order; do
    case $k in
      file) echo "file $(cd /tmp && SGLANG_IS_IN_CI=true t python3 "$F" -v)";;
      ab) echo "ab-all-jobs4 $(t python3 -m ci run --out "$OUT/ab" --backend cuda --tests test/registered --preload torch --jobs 4)"
          tail -1 "$OUT/last.log"; rm -rf "$OUT/ab";;
    esac
  done
done
rm -f "$OUT/t.txt" "$OUT/last.log"
