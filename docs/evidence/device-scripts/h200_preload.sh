#!/usr/bin/env bash
# Device run, issue 26 item 4: the A/B of every registered CUDA file the series adds (both
# sides) with --preload "$PRELOAD", against one `python FILE -v` of that file, and the A/B
# without preload; alternated, 3 repeats, as sglang's CI runs them (SGLANG_IS_IN_CI=true).
. "$(dirname "$0")/preamble.sh"
PRELOAD=${PRELOAD:-torch}
stub_kernels
F=$PWD/test/registered/unit/layers/attention/test_dsv4_sparse_prefill_workspace.py
python3 -c "import sglang.srt.layers.attention.dsv4.sparse_prefill_utils" >/dev/null 2>&1  # bytecode caches
t() { /usr/bin/time -f "%e" -o "$OUT/t.txt" "$@" > "$OUT/last.log" 2>&1; local rc=$?; echo "$(tail -1 "$OUT/t.txt") s rc=$rc"; }
for r in 1 2 3; do
  echo "repeat $r"
  if [ $((r % 2)) = 1 ]; then order="file preload fresh"; else order="fresh preload file"; fi
  for k in $order; do
    case $k in
      file) echo "file $(cd /tmp && SGLANG_IS_IN_CI=true t python3 "$F" -v)";;
      preload) echo "preload $(t python3 -m ci run --out "$OUT/pre$r" --backend cuda --tests test/registered --preload "$PRELOAD")"; tail -3 "$OUT/last.log";;
      fresh) echo "fresh $(t python3 -m ci run --out "$OUT/fresh$r" --backend cuda --tests test/registered)"; tail -1 "$OUT/last.log";;
    esac
  done
done
python3 -c "import json; d=json.load(open('$OUT/pre1/results.json')); print('preload record:', json.dumps(d['environment'].get('preload'))[:600])"
rm -rf "$OUT"/pre* "$OUT"/fresh* "$OUT/t.txt"
