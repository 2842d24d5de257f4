#!/usr/bin/env bash
# Device run: the A/B through ci run on CUDA with the current registered test and harness.
. "$(dirname "$0")/preamble.sh"
echo "== A/B"; time "$PY" -m ci run --out "$OUT/ab" --backend cuda 2>&1 | tail -22
echo "== upstream runner's call: python FILE -v, change mode"; (cd /tmp && time "$PY" "$OLDPWD"/test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py -v 2>&1 | tail -4) 
rm -rf "$OUT/ab/pictures" "$OUT/ab/logs"
