#!/usr/bin/env bash
# Device run, issue 26 item 4 (what is left above 1.2x): the A/B of the series' CUDA test file
# (both sides, --preload "$PRELOAD", as sglang's CI runs it) by this checkout's `ci run` and, with
# OLD, by the commit before its start-up cuts; against one `python3 FILE -v` of each side alone
# (SGLANG_IS_IN_CI=true, the change side as before and the unmodified side, whose three
# regressions sglang's CI retries after a sleep of 1.5-2 s each); and both again outside CI mode
# (`ci run --outside-upstream-ci`, `python3 FILE -v`), where nothing is retried. Alternated,
# $REPEATS repeats. After each A/B one line says where its time went: each side's file process,
# what ci run spent outside the slower one (its start, the preload, the report), and the retry
# sleeps in the unmodified side's log.
#   OLD: a folder holding the files of the commit before the cuts, made before the run:
#        mkdir -p .whl/old && git archive 7e471ff | tar -x -C .whl/old
#   bash .whl/h200_overhead.sh                        # PRELOAD=torch REPEATS=3 OLD=.whl/old
. "$(dirname "$0")/preamble.sh"
PRELOAD=${PRELOAD:-torch}
REPEATS=${REPEATS:-3}
OLD=${OLD:-.whl/old}
[ -f "$OLD/ci/__main__.py" ] || OLD=""
stub_kernels
F=$PWD/test/registered/unit/layers/attention/test_dsv4_sparse_prefill_workspace.py
python3 -c "import sglang.srt.layers.attention.dsv4.sparse_prefill_utils" >/dev/null 2>&1  # bytecode caches
for tree in "$PWD" ${OLD:+"$OLD"}; do  # and the bot's own
  (cd "$tree" && python3 -c "import ci.__main__, abtest.run, evidence.junit, series.seriesdir, report.render, report.pictures, matplotlib.pyplot") >/dev/null 2>&1
done
t() { /usr/bin/time -f "%e" -o "$OUT/t.txt" "$@" > "$OUT/last.log" 2>&1; local rc=$?; echo "$(tail -1 "$OUT/t.txt") s rc=$rc"; }
split() {  # where one A/B's wall time went, from its results folder: split OUT_DIR
  python3 - "$1" "$(tail -1 "$OUT/t.txt")" <<'EOF'
import json, pathlib, re, sys
out, wall = pathlib.Path(sys.argv[1]), float(sys.argv[2])
if not (out / "results.json").is_file():
    sys.exit(f"  no results in {out}")
data = json.loads((out / "results.json").read_text())
sides = {}
for file in data["files"]:
    for mode, record in file["modes"].items():
        sides[mode] = sides.get(mode, 0.0) + (record.get("duration_s") or 0.0)
delays = [float(x) for log in out.glob("logs/*.unmodified.log")
          for x in re.findall(r"Will delay ([0-9.]+)s and retry", log.read_text(errors="replace"))]
each = ", ".join(f"{mode} {seconds:.2f} s" for mode, seconds in sorted(sides.items()))
print(f"  file processes: {each}; outside the slower: {wall - max(sides.values()):.2f} s; "
      f"unmodified side's retry sleeps: {sum(delays):.2f} s ({len(delays)}); "
      f"pictures: {len(data.get('pictures') or {})}; preload: {json.dumps(data['environment'].get('preload'))[:160]}")
EOF
}
ab() {  # ab NAME TREE TESTS [ci run flags...]
  local name=$1 tree=$2 tests=$3; shift 3
  echo "$name $(cd "$tree" && t python3 -m ci run --out "$OUT/$name" --backend cuda --tests "$tests" --preload "$PRELOAD" "$@")"
  tail -1 "$OUT/last.log"; split "$OUT/$name"
}
# new: the DSV4 fix's CUDA file (the baseline's file) both sides; new-all: every CUDA file the
# series adds (both fixes: 0001's and 0003's), both sides
kinds="file-change file-unmodified new new-all ${OLD:+old} plain-file outside-new"
for r in $(seq "$REPEATS"); do
  echo "repeat $r"
  order=$kinds
  [ $((r % 2)) = 0 ] && order=$(echo "$kinds" | tr ' ' '\n' | tac | tr '\n' ' ')
  for k in $order; do
    case $k in
      file-change) echo "file-change $(cd /tmp && SGLANG_IS_IN_CI=true t python3 "$F" -v)";;
      file-unmodified) echo "file-unmodified $(cd /tmp && SGLANG_OVERLAY_DISABLE=1 SGLANG_IS_IN_CI=true t python3 "$F" -v)";;
      new) ab new "$PWD" "$F";;
      new-all) ab new-all "$PWD" test/registered;;
      old) ab old "$OLD" "$F";;
      plain-file) echo "plain-file $(cd /tmp && unset SGLANG_IS_IN_CI && t python3 "$F" -v)";;
      outside-new) ab outside-new "$PWD" "$F" --outside-upstream-ci;;
    esac
  done
  rm -rf "$OUT"/new "$OUT"/new-all "$OUT"/old "$OUT"/outside-new
done
rm -f "$OUT/t.txt" "$OUT/last.log"
