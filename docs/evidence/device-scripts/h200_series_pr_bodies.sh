#!/usr/bin/env bash
# Device run, issue 33: each fix's pull request evidence and description from the series' own
# trees only, with one command per fix and backend: `python3 -m tools.series ab` materialises
# sglang 0.5.23, materialises it again and applies that fix alone (its pull request), runs the
# fix's own registered tests with `ci run --unmodified-src BASE --change-src BASE+FIX` as sglang's
# CI runs each file (SGLANG_IS_IN_CI=true; the overlay plays no part), and renders the
# description from that folder (`pr-body --no-check`). Results land in $OUT/fix-NNNN/.
# Same .whl/ set as h200_fused_kv_ab.sh (README.md beside this script); needs git.
. "$(dirname "$0")/preamble.sh"
stub_kernels
# the installed overlay must play no part in either tree's process
export SGLANG_OVERLAY_DISABLE=1
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
command -v git > /dev/null || { echo "no git on this machine: the series tools need it to make the trees"; exit 2; }
# materialize reads the release's wheel from its cache: nothing can be downloaded here.
mkdir -p .cache/wheels/0.5.23 && cp .whl/sglang-0.5.23-*.whl .cache/wheels/0.5.23/
code=0
for fix in 0001 0003; do
  for backend in cuda cpu; do
    echo "== fix $fix, $backend"
    # --no-check: check's pinned hooks install from PyPI, which this machine cannot reach. Render
    # the committed description on the CPU machine from the fetched folder, check included:
    #   python -m tools.series pr-body --results FILES/fix-NNNN-cuda/cuda --fix NNNN
    /usr/bin/time -f "%e s wall" python3 -m tools.series ab --fix "$fix" --backend "$backend" \
      --out "$OUT/fix-$fix-$backend" --no-check 2>&1 | tail -12
    [ "${PIPESTATUS[0]}" = 0 ] || code=1
    rm -rf "$OUT/fix-$fix-$backend/trees" "$OUT/fix-$fix-$backend/$backend/pictures"
  done
done
exit $code
