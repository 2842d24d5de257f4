#!/usr/bin/env bash
# Device run: CUDA cases forked from the test process (ci/file_process.py defers CUDA), the A/B
# through ci run, upstream's runner call (fresh interpreters: import creates a context), and the
# proof benchmark.
. "$(dirname "$0")/preamble.sh"
M=sglang.srt.layers.attention.dsv4.sparse_prefill_utils
"$PY" -c "import $M" >/dev/null 2>&1  # first import writes the bytecode caches
echo "== bare import"; /usr/bin/time -f "%e s" "$PY" -c "import $M"
echo "== A/B"; /usr/bin/time -f "A/B %e s" "$PY" -m ci run --out "$OUT/ab" --backend cuda 2>&1 | tail -20
echo "== upstream runner's call: python FILE -v, change mode"; (cd /tmp && /usr/bin/time -f "python FILE -v %e s" "$PY" "$OLDPWD"/test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py -v 2>&1 | tail -5)
echo "== proof benchmark"; "$PY" -m benchmark --parts proof --device cuda --time-budget 200 2>&1 | tail -15
cp benchmark/results/nvidia-h200.json BENCHMARKS.md "$OUT/" 2>/dev/null
rm -rf "$OUT/ab/pictures"
