"""``sglang-overlay``: what a new sglang process of this environment gets (``status``, asked of
a fresh interpreter, never patching in this one), and what the running ones got
(``status --processes``). Exit 0 when all run the fixed code or are unfixed on purpose, 1
otherwise or on an unrecognised setting, 2 for bad usage (README.md, "Control and visibility").
"""

import argparse
import json
import os
import subprocess
import sys

from sglang_overlay import PATCH_ID, PATCHED_MODULES, __version__

# The fresh process: note whether the .pth ran, import as a user's process would, report.
PROBE = """
import json, sys
hook_ran = "sglang_overlay.import_hook" in sys.modules
import sglang_overlay
from sglang_overlay import overlay
records = overlay.import_patched_modules(keep_going=True)
print("SGLANG_OVERLAY_STATUS " + json.dumps({"hook_ran": hook_ran, "records": records,
    "overlay_version": sglang_overlay.__version__,
    "overlay_path": sglang_overlay.__path__[0]}))
"""
MARK = "SGLANG_OVERLAY_STATUS "
PROBE_TIMEOUT_S = 600
MIB = float(1 << 20)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not a usage block
        self.exit(2, f"sglang-overlay: {message} (see sglang-overlay --help)\n")


def main(argv=None) -> int:
    parser = Parser(
        prog="sglang-overlay",
        description="Release-first scratch workspaces (DSV4 sparse prefill, fused KV "
        "materialisation) for installed sglang releases.",
    )
    parser.add_argument("--version", action="version", version=f"sglang-overlay {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    show = verbs.add_parser(
        "status",
        help="what a fresh sglang process of this environment gets, one line per patch",
        description="Start a fresh interpreter of this Python, import each patched module as "
        "any sglang process would, and report each patch. Patches nothing in this process. "
        "With --processes: what every live sglang process on this machine recorded.",
    )
    show.add_argument("--json", action="store_true", help="print JSON for machines")
    show.add_argument(
        "--processes",
        action="store_true",
        help="every live sglang process: its state, overlay build and workspace high-water mark",
    )
    show.add_argument(
        "--pid",
        type=int,
        action="append",
        metavar="PID",
        help="with --processes: only this process (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.pid and not args.processes:
        show.error("--pid needs --processes")
    try:
        if args.processes:
            return processes_status(args.json, set(args.pid) if args.pid else None)
        return fresh_status(args.json)
    except KeyboardInterrupt:
        print("sglang-overlay: interrupted", file=sys.stderr)
        return 130


def fresh_status(as_json: bool) -> int:
    from sglang_overlay import config
    from sglang_overlay.overlay import OK_STATES

    report = fresh_process_status()
    records, problems = report["records"], config.problems()
    for r in records:
        r.update(overlay_version=report.get("overlay_version"), misconfigured=problems)
    if as_json:
        print(json.dumps(records, indent=2))
    else:
        modules = ", ".join(dict.fromkeys(names[0] for names in PATCHED_MODULES.values()))
        say(f"checked in a fresh process: {sys.executable} -c 'import {modules}'")
        say(f"overlay {report.get('overlay_version')} at {report.get('overlay_path')}")
        for r in records:
            say(f"{r['patch']}  {r['state']}  sglang {r['sglang_version']}  {r['target']}")
            say(f"    {r['reason']}")
        for problem in problems:
            say(f"not recognised: {problem}")
    return 0 if all(r["state"] in OK_STATES for r in records) and not problems else 1


def processes_status(as_json: bool, pids: "set[int] | None" = None) -> int:
    from sglang_overlay import records

    records.prune(os.getuid())
    rows = [row for p in records.processes(pids) for row in process_rows(p)]
    if as_json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        among = f" among pids {', '.join(map(str, sorted(pids)))}" if pids else ""
        say(f"no live sglang process on this machine{among}")
    for r in rows if not as_json else ():
        say(
            f"pid {r['pid']}  {r['state']}  overlay {r['overlay_version']}  high-water "
            f"{r['high_water_bytes'] / MIB:.1f} MiB  sglang {r['sglang_version']}  {r['command']}"
        )
        say(f"    {r['reason']}")
    return 0 if all(row_ok(r) for r in rows) else 1


def row_ok(row: dict) -> bool:
    """Whether a live process's row passes: it runs the fixed code, is unfixed on purpose, or
    has not imported the patch's module; never a record not believed or a setting not
    recognised."""
    from sglang_overlay.overlay import OK_STATES

    if row["state"] in ("invalid-record", "misconfigured"):
        return False
    return row["state"] in OK_STATES or row["workspace_imported"] is False


def process_rows(process: dict) -> "list[dict]":
    """One row per patch of a live process, from its record: ``unpatched`` without one,
    ``invalid-record`` when the record found is not believed (records.py says why),
    ``misconfigured`` when the process started with a setting the overlay does not recognise."""
    from sglang_overlay import records

    base = {"pid": process["pid"], "command": process["command"][:200]}
    record = process["record"]
    if record is None:
        refused = records.refused_dirs(process["uid"])
        if process.get("problem"):
            state = "invalid-record"
            reason = f"its record is not believed: {process['problem']}"
        elif refused:
            state = "invalid-record"
            reason = f"no record could be written: {'; '.join(refused)}"
        else:
            state = "unpatched"
            reason = (
                "no record: the process started before the overlay was installed, or the "
                "overlay did not load in it; restart it to get the fix"
            )
        return [
            {
                **base,
                "patch": PATCH_ID,
                "state": state,
                "reason": reason,
                "sglang_version": None,
                "overlay_version": None,
                "high_water_bytes": 0,
                "workspace_imported": None,
            }
        ]
    keep = ("high_water_bytes", "workspace_imported", "overlay_version", "overlay_path", "python")
    # a patch's own high-water mark and import flag win over the record's (the DSV4's); the
    # pid and command stay /proc's, whatever a patch entry claims
    common = {k: record.get(k) for k in keep}
    rows = [{**base, **common, **patch, **base} for patch in record["patches"]]
    problems = record.get("misconfigured") or []
    for row in rows if problems else ():
        row["reason"] = f"not recognised: {'; '.join(problems)}; so: {row['reason']}"
        row.update(state="misconfigured", patch_state=row["state"])
    return rows


def say(line: str) -> None:
    """Print ``line``; what stdout cannot encode (a reason quoting the user's setting on an
    ASCII terminal) comes out as escapes, not as a traceback instead of the report."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(inert(line).encode(encoding, "backslashreplace").decode(encoding))


def inert(text: str) -> str:
    """TEXT safe for a terminal: ESC (so CSI and OSC), CR, the other C0 and C1 controls, DEL,
    bidi overrides and every other format or separator character shown as a visible escape.
    Record text and argv are anyone's, and root reads them."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def fresh_process_status() -> dict:
    """The status report of a fresh interpreter of this Python and environment."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE],
            env=probe_env(),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return _failed(f"a fresh process did not finish within {PROBE_TIMEOUT_S} s")
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        modules = " and ".join(dict.fromkeys(names[0] for names in PATCHED_MODULES.values()))
        return _failed(f"a fresh process failed to import {modules}: {tail}")
    report = json.loads(lines[-1][len(MARK) :])
    if not report["hook_ran"]:
        for r in report["records"]:
            if r["state"] == "pending":
                r["reason"] = (
                    "the start-up hook did not run in a fresh process (is sglang_overlay.pth "
                    "in site-packages, and site processing on?); " + r["reason"]
                )
    return report


def probe_env() -> dict:
    """This environment for the fresh process, without prometheus_client's multiprocess
    directory: the probe must add no series to the host's /metrics."""
    multiprocess = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")
    return {k: v for k, v in os.environ.items() if k not in multiprocess}


def _failed(reason: str) -> dict:
    """A report of one ``failed`` record per patch, when the fresh process gave none."""
    from sglang_overlay.overlay import sglang_version

    version = sglang_version()
    return {
        "records": [
            {
                "patch": p,
                "target": m[0],
                "sglang_version": version,
                "state": "failed",
                "reason": reason,
            }
            for p, m in PATCHED_MODULES.items()
        ]
    }


if __name__ == "__main__":
    sys.exit(main())
