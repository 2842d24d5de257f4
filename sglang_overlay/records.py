"""Per-process records of what the overlay did, for ``sglang-overlay status --processes``
(README.md, "Running processes"). ``write`` runs in the serving process and never raises; the
readers look only at ``/proc`` and the record files, never signalling or attaching to a process.

A health check runs the readers as root, so a record is believed only where nobody else could
have written it: a regular file, owned by the process's uid or root, of at most
``MAX_RECORD_BYTES``, in a real directory (not a link) of that uid that neither group nor others
may write. Files are opened without following links or blocking (a FIFO returns at once), under
the directory's own descriptor, so nothing can be swapped in between the check and the use.
"""

import json
import os
import stat
import tempfile
from pathlib import Path

from sglang_overlay.command_lines import runs_sglang

RUNTIME_DIR_ENV = "SGLANG_OVERLAY_RUNTIME_DIR"
PROC = Path("/proc")
MAX_RECORD_BYTES = 64 * 1024
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Untrusted(Exception):
    """Why a record file or its directory cannot be believed (one line)."""


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


def _proc_stat(pid: int) -> "list[str]":
    """``/proc/PID/stat`` from field 3 on (after the command name), or [] when unreadable."""
    try:
        return (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def start_time(pid: int) -> "str | None":
    """The pid's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else None


def program(pid: int) -> "dict | None":
    """What identifies the program the pid runs now, which an ``exec`` changes while pid and
    start time stay: its executable's device and inode, and where its stack starts (field 28,
    new at every exec under address randomisation; 0 where the kernel hides it from us)."""
    try:
        info = os.stat(PROC / str(pid) / "exe")
    except OSError:  # not ours to read, or gone
        return None
    fields = _proc_stat(pid)
    stack = fields[25] if len(fields) > 25 and fields[25].isdigit() else "0"
    return {"exe_dev": info.st_dev, "exe_ino": info.st_ino, "stack_start": int(stack)}


def same_program(recorded, now: "dict | None") -> bool:
    """Whether a record's ``program`` is the program the pid runs now (True when the reader
    cannot see the pid's executable: then only its start time can tell)."""
    if now is None:
        return True
    if not isinstance(recorded, dict):
        return False
    if (recorded.get("exe_dev"), recorded.get("exe_ino")) != (now["exe_dev"], now["exe_ino"]):
        return False
    stacks = (recorded.get("stack_start"), now["stack_start"])
    return 0 in stacks or stacks[0] == stacks[1]


def untrusted_dir(fd: int, uid: int) -> "str | None":
    """Why the open directory ``fd`` cannot hold ``uid``'s records, or None when it can."""
    info = os.fstat(fd)
    if info.st_uid != uid:
        return f"the directory belongs to uid {info.st_uid}, not {uid}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"the directory is writable by others (mode {stat.filemode(info.st_mode)})"
    return None


def open_dir(directory: Path, uid: int) -> int:
    """A descriptor of ``directory`` if it may hold ``uid``'s records; raises ``Untrusted``
    (a link, not a directory, another owner, writable by others) or FileNotFoundError."""
    try:
        fd = os.open(directory, _OPEN_DIR)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symbolic link; ENOTDIR: a file
        raise Untrusted(f"its directory is a link or no directory ({exc.strerror})") from None
    why = untrusted_dir(fd, uid)
    if why is not None:
        os.close(fd)
        raise Untrusted(why)
    return fd


def refused_dirs(uid: int) -> "list[str]":
    """Each existing record directory of ``uid`` that cannot hold its records (another user
    made it, or others may write it: someone squatted the predictable name), with why. A
    process of ``uid`` writes no record there, so its row says this instead of ``unpatched``."""
    refused = []
    for directory in record_dirs(uid):
        try:
            os.close(open_dir(directory, uid))
        except Untrusted as exc:
            refused.append(f"{directory}: records refused there: {exc}")
        except OSError:
            continue
    return refused


def load(dir_fd: int, name: str, uid: int) -> dict:
    """The JSON object in ``name`` under ``dir_fd``; raises ``Untrusted`` for anything that is
    not a small regular file of ``uid`` or root holding one, FileNotFoundError when absent."""
    try:
        fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Untrusted(f"cannot be opened as a file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Untrusted(f"not a regular file ({stat.filemode(info.st_mode)})")
        if info.st_uid not in (uid, 0):
            raise Untrusted(f"the file belongs to uid {info.st_uid}, not {uid} or root")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise Untrusted(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        record = json.loads(data)
    except ValueError:
        raise Untrusted("not JSON") from None
    if not isinstance(record, dict):
        raise Untrusted("not a JSON object")
    return record


def malformed(record: dict) -> "str | None":
    """What is missing or wrong in a record for ``status --processes``, or None."""
    patches = record.get("patches")
    if not isinstance(patches, list) or not patches:
        return "it lists no patch"
    for patch in patches:
        if not isinstance(patch, dict) or not all(
            isinstance(patch.get(k), str) for k in ("patch", "state", "reason", "sglang_version")
        ):
            return "a patch without its id, state, reason and sglang version"
        # a patch's own mark and flag (0.2.0 on) stand in its row for the record's
        if not _bytes(patch.get("high_water_bytes", 0)):
            return "a patch with a high-water mark that is no number of bytes"
        if not isinstance(patch.get("workspace_imported", False), bool):
            return "a patch with a workspace_imported flag that is no boolean"
    if not _bytes(record.get("high_water_bytes")):
        return "no high-water mark"
    if not isinstance(record.get("workspace_imported"), bool):
        return "no workspace_imported flag"
    if not isinstance(record.get("program"), dict):
        return "no identity of the program that wrote it"
    misconfigured = record.get("misconfigured", [])
    if not isinstance(misconfigured, list) or not all(isinstance(m, str) for m in misconfigured):
        return "misconfigured is not a list of settings"
    return None


def _bytes(value) -> bool:
    return type(value) is int and value >= 0


def write(fields: dict) -> "Path | None":
    """Replace this process's record with ``fields``; the path written, or None."""
    pid, uid = os.getpid(), os.getuid()
    record = {**fields, "pid": pid, "start_time": start_time(pid), "program": program(pid)}
    data = json.dumps(record).encode()
    for directory in record_dirs(uid):
        try:
            # Parents are never made: /run/user/UID exists only while the user has a session.
            directory.mkdir(mode=0o700, exist_ok=True)
            dir_fd = open_dir(directory, uid)  # the readers' rules, or they would not believe it
        except (OSError, Untrusted):
            continue
        try:
            temporary, name = f".{pid}.tmp", f"{pid}.json"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temporary, flags, 0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return directory / name
        except OSError:
            continue
        finally:
            os.close(dir_fd)
    return None


def processes(pids: "set[int] | None" = None) -> "list[dict]":
    """Every live process (of ``pids``, when given) that runs sglang or has a record file:
    pid, uid, command, record (believed) and problem (why a record found was not believed)."""
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if pids is not None and pid not in pids:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            argv = [a for a in cmdline.split("\0") if a]
            uid = entry.stat().st_uid
        except OSError:  # gone meanwhile, or not ours to read
            continue
        record, problem = read(pid, uid)
        if record is not None or problem is not None or runs_sglang(argv):
            found.append(
                {
                    "pid": pid,
                    "uid": uid,
                    "command": " ".join(argv),
                    "record": record,
                    "problem": problem,
                }
            )
    return sorted(found, key=lambda p: p["pid"])


def read(pid: int, uid: int) -> "tuple[dict | None, str | None]":
    """The believed record of the live process ``pid`` of ``uid`` and, when a record file was
    found but not believed, why. A record whose start time or program is not the pid's now
    belongs to an earlier process of that pid, or to what this one ran before an ``exec``."""
    started, running, problems = start_time(pid), program(pid), []
    for directory in record_dirs(uid):
        name = f"{pid}.json"
        try:
            os.lstat(directory / name)
        except OSError:
            continue  # no record here (or nothing we could ever read)
        try:
            dir_fd = open_dir(directory, uid)
            try:
                record = load(dir_fd, name, uid)
            finally:
                os.close(dir_fd)
        except Untrusted as exc:
            problems.append(f"{directory / name}: {exc}")
            continue
        except OSError:  # gone meanwhile
            continue
        if started is None or record.get("start_time") != started:
            continue
        why = malformed(record)
        if why is not None:
            problems.append(f"{directory / name}: {why}")
            continue
        if not same_program(record["program"], running):
            continue
        return record, None
    return None, "; ".join(problems) or None


def prune(uid: int) -> int:
    """Delete this user's records of processes that are gone; how many. Only in directories
    the readers trust, only regular files of ``uid`` or root, by name under the directory's
    descriptor: never through a link."""
    removed = 0
    for directory in record_dirs(uid):
        try:
            dir_fd = open_dir(directory, uid)
        except (OSError, Untrusted):
            continue
        try:
            for name in os.listdir(dir_fd):
                stem, dot, suffix = name.partition(".")
                if not (stem.isdigit() and dot and suffix == "json"):
                    continue
                try:
                    record = load(dir_fd, name, uid)
                except (OSError, Untrusted):
                    continue
                pid = int(stem)
                gone = record.get("start_time") != start_time(pid)
                recorded = record.get("program")
                execed = isinstance(recorded, dict) and not same_program(recorded, program(pid))
                if gone or execed:
                    try:
                        os.unlink(name, dir_fd=dir_fd)
                        removed += 1
                    except OSError:
                        continue
        finally:
            os.close(dir_fd)
    return removed
