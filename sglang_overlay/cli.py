"""``sglang-overlay status``: what a new sglang process gets (a fresh interpreter is asked),
with ``--processes`` what the running ones got. Exit 0 when each runs the fixed code or is
unfixed on purpose, 1 otherwise or on an unrecognised setting, 2 for bad usage.
"""

import argparse
import json
import os
import subprocess
import sys

from sglang_overlay import PATCH_IDS, PATCHED_MODULES, OverlayError, __version__, config, observe
from sglang_overlay.overlay import OK_STATES, import_patched_modules, sglang_version

# The fresh process notes whether the .pth ran before anything of ours is imported.
PROBE = (
    "import sys; hook_ran = 'sglang_overlay.activation' in sys.modules\n"
    "from sglang_overlay.cli import probe; probe(hook_ran)\n"
)
PROBE_TIMEOUT_S = 600
MODULES = tuple(dict.fromkeys(names[0] for names in PATCHED_MODULES.values()))


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not a usage block
        raise OverlayError(f"{message} (see sglang-overlay --help)")


def main(argv=None) -> int:
    parser = Parser(
        prog="sglang-overlay",
        description="Release-first scratch workspaces for sglang. status: what a fresh process "
        "of this environment gets, one line per patch; with --processes: every live one.",
    )
    parser.add_argument("--version", action="version", version=f"sglang-overlay {__version__}")
    parser.add_argument("verb", choices=["status"])
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--processes", action="store_true", help="every live sglang process")
    parser.add_argument("--pid", type=int, action="append", help="with --processes: only this one")
    try:
        args = parser.parse_args(argv)
        if args.pid and not args.processes:
            raise OverlayError("--pid needs --processes")
        if args.pid and min(args.pid) <= 0:
            raise OverlayError(f"--pid {min(args.pid)}: not a process id")
        pids = set(args.pid) if args.pid else None
        lines, ok = processes_status(args.json, pids) if args.processes else fresh_status(args.json)
    except OverlayError as exc:
        print(f"sglang-overlay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sglang-overlay: interrupted", file=sys.stderr)
        return 130
    try:
        for line in lines:  # JSON escapes what a terminal must not see on its own
            print(line) if args.json else say(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head -1`: the reader has what it wanted; the verdict stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:  # stdout cannot take it (a full disk): one line, not a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"sglang-overlay: cannot write the report: {exc.strerror}", file=sys.stderr)
        return 2
    return 0 if ok else 1


def fresh_status(as_json: bool) -> "tuple[list[str], bool]":
    report = fresh_process_status()
    records, problems = report["records"], config.problems()
    for r in records:
        r.update(overlay_version=report.get("overlay_version"), misconfigured=problems)
    ok = all(r["state"] in OK_STATES for r in records) and not problems
    if as_json:
        return [json.dumps(records, indent=2)], ok
    lines = [f"checked in a fresh process: {sys.executable} -c 'import {', '.join(MODULES)}'",
             f"overlay {report.get('overlay_version')} at {report.get('overlay_path')}"]  # fmt: skip
    for r in records:
        head = f"{r['patch']}  {r['state']}  sglang {r['sglang_version']}  {r['target']}"
        lines += [head, f"    {r['reason']}"]
    return lines + problems, ok  # each problem names its setting and "not recognised"


def processes_status(as_json: bool, pids: "set[int] | None" = None) -> "tuple[list[str], bool]":
    listed = [(p, process_rows(p)) for p in observe.processes(pids)]
    # a pid asked for by name that is not a live sglang process is not a pass
    ok = all(row_ok(r) for _, rows in listed for r in rows) and (listed or not pids)
    if as_json:
        return [json.dumps([r for _, rows in listed for r in rows], indent=2)], ok
    if not listed:
        among = f" among pids {', '.join(map(str, sorted(pids)))}" if pids else ""
        return [f"no live sglang process on this machine{among}"], ok
    short = [p.split("-")[0] for p in PATCH_IDS]
    lines = ["  ".join([f"{'PID':>7}", *(f"{s:<15}" for s in short), "COMMAND"])]
    for process, rows in listed:
        states = [r["state"] for r in rows]
        command = process["command"][:60] + ("..." if len(process["command"]) > 60 else "")
        lines.append("  ".join([f"{process['pid']:>7}", *(f"{s:<15}" for s in states), command]))
        reasons = dict.fromkeys(
            r["reason"] for r in rows if not row_ok(r) or r["state"] == "failed"
        )
        lines.extend(f"{'':>9}{reason}" for reason in reasons)
    return lines, ok


def row_ok(row: dict) -> bool:
    """Fixed, unfixed on purpose, or the patch's module not imported (with a good record)."""
    if row["state"] == "misconfigured":
        return False
    return row["state"] in OK_STATES or row.get("workspace_imported") is False


def process_rows(process: dict) -> "list[dict]":
    """One row per patch of a live process, from its record: ``unpatched`` without one,
    ``invalid-record`` when it or its folder is wrong, ``misconfigured`` on a bad setting."""
    base = {"pid": process["pid"], "command": process["command"][:200]}
    record = process["record"]
    if record is None:
        state = "unpatched"
        reason = ("no record: the process started before the overlay was installed, or the "
                  "overlay did not load in it; restart it to get the fix")  # fmt: skip
        if process["problem"]:
            state, reason = "invalid-record", process["problem"]
        empty = dict.fromkeys(("sglang_version", "overlay_version", "workspace_imported"))
        return [
            {**base, **empty, "patch": p, "state": state, "reason": reason, "high_water_bytes": 0}
            for p in PATCH_IDS
        ]
    keep = ("overlay_version", "overlay_path", "python")
    rows = [{**patch, **{k: record.get(k) for k in keep}, **base} for patch in record["patches"]]
    problems = record.get("misconfigured") or []
    for row in rows if problems else ():
        row["reason"] = f"{'; '.join(map(str, problems))}; so: {row['reason']}"
        row.update(state="misconfigured", patch_state=row["state"])
    return rows


def say(line: str) -> None:
    """Print ``line`` with what a terminal must not see, or stdout cannot encode, escaped
    (record text and argv are anyone's)."""
    line = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding))


def fresh_process_status() -> dict:
    """A fresh interpreter's report, without the multiprocess folder (no series in /metrics)."""
    hidden = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    command = [sys.executable, "-c", PROBE]
    try:
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
        report = json.loads(proc.stdout) if proc.returncode == 0 else None
    except subprocess.TimeoutExpired:
        return _failed(f"a fresh process did not finish within {PROBE_TIMEOUT_S} s")
    except ValueError:
        report = None
    if not isinstance(report, dict):  # failed, or something else wrote to its stdout
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return _failed(f"a fresh process failed to import {' and '.join(MODULES)}: {tail}")
    if not report["hook_ran"]:
        for r in report["records"]:
            if r["state"] == "pending":
                r["reason"] = (
                    "the start-up hook did not run in a fresh process (is sglang_overlay.pth "
                    "in site-packages, and site processing on?); " + r["reason"]
                )
    return report


def probe(hook_ran: bool) -> None:
    """In the fresh process: import as a user's would, one JSON document on stdout."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    records = import_patched_modules(keep_going=True)
    with channel:
        json.dump({"hook_ran": hook_ran, "records": records, "overlay_version": __version__,
                   "overlay_path": os.path.dirname(__file__)}, channel)  # fmt: skip


def _failed(reason: str) -> dict:
    version = sglang_version()
    return {"records": [{"patch": p, "target": m[0], "sglang_version": version, "state": "failed",
                         "reason": reason} for p, m in PATCHED_MODULES.items()]}  # fmt: skip
