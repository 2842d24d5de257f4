#!/usr/bin/env bash
# Device run: the A/B through ci run on CUDA with the current harness, then the proof benchmark.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=$(python3 -c "import sys; print(sys.executable)")
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
"$PY" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'cores', __import__('os').cpu_count())"
echo "== bare import of the workspace module"; time "$PY" -c "import sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
echo "== A/B"; time "$PY" -m ci run --out "$OUT/ab" --backend cuda 2>&1 | tail -22
echo "== proof benchmark"; "$PY" -m benchmark --parts proof --device cuda --time-budget 300 2>&1 | tail -15
cp benchmark/results/nvidia-h200.json BENCHMARKS.md "$OUT/" 2>/dev/null
rm -rf "$OUT/ab/pictures" "$OUT/ab/logs"
ls "$OUT" "$OUT/ab"
