"""``sglang-overlay``: report what a plain sglang process of this environment gets.

``status`` never patches in its own process: that would report what the CLI did, not what a
user's process gets. It starts a fresh interpreter of the same Python and environment, which
imports the workspace module the way any sglang process does and prints its status records.
Exit codes: 0 when that process runs the fixed code or is unfixed on purpose (``applied``,
``upstream-fixed``, ``not-present``, ``disabled``); 1 when it would run unmodified sglang for
any other reason (including a start-up hook that never ran); 2 for bad usage.
"""

import argparse
import json
import subprocess
import sys

from sglang_overlay import PATCH_ID, WORKSPACE_MODULE

# The fresh process: note whether the .pth ran, import as a user's process would, report.
PROBE = """
import json, sys
hook_ran = "sglang_overlay.import_hook" in sys.modules
from sglang_overlay import overlay
records = overlay.import_workspace_module()
print("SGLANG_OVERLAY_STATUS " + json.dumps({"hook_ran": hook_ran, "records": records}))
"""
MARK = "SGLANG_OVERLAY_STATUS "
PROBE_TIMEOUT_S = 600


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="sglang-overlay",
        description="Release-first DSV4 sparse-prefill workspace for installed sglang releases.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    show = verbs.add_parser(
        "status",
        help="what a fresh sglang process of this environment gets, one line per patch",
        description="Start a fresh interpreter of this Python, import the workspace module as "
        "any sglang process would, and report each patch. Patches nothing in this process.",
    )
    show.add_argument("--json", action="store_true", help="print a JSON list of records")
    args = parser.parse_args(argv)

    records = fresh_process_status()
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        say(f"checked in a fresh process: {sys.executable} -c 'import {WORKSPACE_MODULE}'")
        for r in records:
            say(f"{r['patch']}  {r['state']}  sglang {r['sglang_version']}  {r['target']}")
            say(f"    {r['reason']}")
    from sglang_overlay.overlay import OK_STATES

    return 0 if all(r["state"] in OK_STATES for r in records) else 1


def say(line: str) -> None:
    """Print ``line``; what stdout cannot encode (a reason quoting the user's setting on an
    ASCII terminal) comes out as escapes, not as a traceback instead of the report."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding))


def fresh_process_status() -> list:
    """Status records from a fresh interpreter of this Python and environment."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [_failed(f"a fresh process did not finish within {PROBE_TIMEOUT_S} s")]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return [_failed(f"a fresh process failed to import {WORKSPACE_MODULE}: {tail}")]
    report = json.loads(lines[-1][len(MARK) :])
    records = report["records"]
    if not report["hook_ran"]:
        for r in records:
            if r["state"] == "pending":
                r["reason"] = (
                    "the start-up hook did not run in a fresh process (is sglang_overlay.pth "
                    "in site-packages, and site processing on?); " + r["reason"]
                )
    return records


def _failed(reason: str) -> dict:
    from sglang_overlay.overlay import sglang_version

    return {
        "patch": PATCH_ID,
        "target": WORKSPACE_MODULE,
        "sglang_version": sglang_version(),
        "state": "failed",
        "reason": reason,
    }


if __name__ == "__main__":
    sys.exit(main())
