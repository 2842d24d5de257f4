"""Per-process records of what the overlay did, for ``sglang-overlay status --processes``
(README.md, "Running processes"). ``write`` runs in the serving process and never raises; the
readers look only at ``/proc`` and the record files, never signalling or attaching to a process.
"""

import json
import os
import stat
import tempfile
from pathlib import Path

RUNTIME_DIR_ENV = "SGLANG_OVERLAY_RUNTIME_DIR"
PROC = Path("/proc")


def record_dirs(uid: int) -> "list[Path]":
    """Where a process of ``uid`` writes its record (the first usable) and readers look."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override and uid == os.getuid():
        return [Path(override)]
    dirs = [
        Path(f"/run/user/{uid}/sglang-overlay"),
        Path(tempfile.gettempdir(), f"sglang-overlay-{uid}"),
        Path(f"/tmp/sglang-overlay-{uid}"),
    ]
    return list(dict.fromkeys(dirs))


def start_time(pid: int) -> "str | None":
    """The pid's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def write(fields: dict) -> "Path | None":
    """Replace this process's record with ``fields``; the path written, or None."""
    pid, uid = os.getpid(), os.getuid()
    data = json.dumps({**fields, "pid": pid, "start_time": start_time(pid)}).encode()
    for directory in record_dirs(uid):
        temporary, path = directory / f".{pid}.tmp", directory / f"{pid}.json"
        try:
            # Shared /tmp: use the directory only if it is a real directory of this user (mode
            # 0700 when we make it), so nobody else can plant or read records there. Parents
            # are never made: /run/user/UID exists only while the user has a session.
            directory.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(directory)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
            return path
        except OSError:
            continue
    return None


def runs_sglang(argv: "list[str]") -> bool:
    """Whether a command line is an sglang process: ``sglang serve``, ``python -m sglang...``,
    a script named sglang*, or a process sglang renamed (``sglang::scheduler_TP0``)."""
    if not argv:
        return False
    first = os.path.basename(argv[0])
    if first.startswith("sglang") and not first.startswith(("sglang-overlay", "sglang_overlay")):
        return True
    if not first.startswith("python"):
        return False
    for i, word in enumerate(argv[1:], 1):
        if word == "-m":
            return i + 1 < len(argv) and argv[i + 1].split(".")[0] == "sglang"
        if word == "-c":
            return False
        if not word.startswith("-"):
            name = os.path.basename(word)
            return name.startswith("sglang") and not name.startswith("sglang-overlay")
    return False


def processes() -> "list[dict]":
    """Every live process that runs sglang or has a valid record: pid, uid, command, record."""
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            argv = [a for a in cmdline.split("\0") if a]
            uid = entry.stat().st_uid
        except OSError:  # gone meanwhile, or not ours to read
            continue
        pid = int(entry.name)
        record = read(pid, uid)
        if record is not None or runs_sglang(argv):
            found.append({"pid": pid, "uid": uid, "command": " ".join(argv), "record": record})
    return sorted(found, key=lambda p: p["pid"])


def read(pid: int, uid: int) -> "dict | None":
    """The record of the live process ``pid``, or None when it has none (a record whose start
    time is not the pid's is another, dead process's)."""
    started = start_time(pid)
    for directory in record_dirs(uid):
        try:
            if os.lstat(directory).st_uid != uid:
                continue
            record = json.loads((directory / f"{pid}.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and started is not None and record.get("start_time") == started:
            return record
    return None


def prune(uid: int) -> int:
    """Delete this user's records of processes that are gone; how many."""
    removed = 0
    for directory in record_dirs(uid):
        for path in directory.glob("*.json") if directory.is_dir() else ():
            try:
                record = json.loads(path.read_text())
                pid = int(path.stem)
                if record.get("start_time") != start_time(pid):
                    path.unlink()
                    removed += 1
            except (OSError, ValueError, AttributeError):
                continue
    return removed
