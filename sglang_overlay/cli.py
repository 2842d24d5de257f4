"""``sglang-overlay``: report what the overlay does to the sglang installed here.

``status`` imports the workspace module, as any sglang process would, and prints one line per
patch (``--json`` for machines). Exit codes: 0 every patch applied, upstream-fixed,
not-present or disabled; 1 a patch is unsupported; 2 bad usage.
"""

import argparse
import json
import sys

OK_STATES = {"applied", "upstream-fixed", "not-present", "disabled"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="sglang-overlay",
        description="Release-first DSV4 sparse-prefill workspace for installed sglang releases.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser(
        "status", help="apply the overlay as an sglang process would, then report each patch"
    )
    show.add_argument("--json", action="store_true", help="print a JSON list of records")
    args = parser.parse_args(argv)

    import sglang_overlay

    records = sglang_overlay.apply()
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        for r in records:
            print(f"{r['patch']}  {r['state']}  sglang {r['sglang_version']}  {r['target']}")
            print(f"    {r['reason']}")
    return 0 if all(r["state"] in OK_STATES for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
