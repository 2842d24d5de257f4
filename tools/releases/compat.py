"""``python -m tools.releases.compat``: the overlay's A/B on every sglang release that imports here.

Each release is installed ``--no-deps`` into a cached folder that shadows the venv's sglang
(``PYTHONPATH``), over the venv's pinned closure; then the overlay's state and the allocating
method's sha256 (``sglang-overlay status``), whether patch 0001 applies to the wheel (the series
matrix), and the proofs in both modes (``python -m ci run``). One row per release (the README's
compatibility table); exit 1 when a release the overlay should cover fails.
"""

import argparse
import json
import sys
from pathlib import Path

from tools.releases.watch import DEFAULT_VERSIONS, REPO, WatchError, check, render, verdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.releases.compat", description=__doc__)
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--out", type=Path, default=REPO / "out" / "compat")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        rows = [check(v, args.out) for v in args.versions]
    except WatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 1 if any(verdict(r) is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
