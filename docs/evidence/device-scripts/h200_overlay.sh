#!/usr/bin/env bash
# Device run: the overlay with its start-up hook on the H200 image's Python, then the A/B.
. "$(dirname "$0")/preamble.sh"
# The image's python3 is itself a venv (/opt/torch/.venv): install into it, as a user would.

"$PY" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
echo "== status (fresh process)"; (cd /tmp && "$PY" -m sglang_overlay status; echo "exit $?")
echo "== status disabled"; (cd /tmp && SGLANG_OVERLAY_DISABLE=1 "$PY" -m sglang_overlay status; echo "exit $?")
echo "== thread race with the real sglang, 5 runs per module, all at once"
for mod in dataclasses inspect ast; do
  for i in 1 2 3 4 5; do
    (cd /tmp && timeout 180 "$PY" -c "
import threading, time
threading.Thread(target=__import__, args=('$mod',), daemon=True).start()
time.sleep(0.001)
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as m
print(getattr(m.SparsePrefillKVBuffer._reserve, '__sglang_overlay_patch__', None))" > /tmp/race-$mod-$i.txt 2>&1; echo "rc=$?" >> /tmp/race-$mod-$i.txt) &
  done
done
wait
for f in /tmp/race-*.txt; do echo "$(basename $f): $(tail -2 $f | tr '\n' ' ')"; done
echo "== A/B"; time "$PY" -m ci run --out "$OUT/ab" --backend cuda --jobs 2 2>&1 | tail -25
