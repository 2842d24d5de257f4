"""What operators see of the overlay: warnings (once per cause), the replacement log, the
per-process record ``status --processes`` reads (one 0700 runtime folder per user), and the
Prometheus gauges. Publishing runs inside sglang's imports and allocations: it never raises.
"""

import atexit
import json
import logging
import os
import re
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from sglang_overlay import OverlayError, __version__

logger = logging.getLogger("sglang_overlay")
RUNTIME_DIR_ENV = "SGLANG_OVERLAY_RUNTIME_DIR"
PROC = Path("/proc")
MIB = float(1 << 20)
STATE_GAUGE = "sglang_overlay_patch_state"
HIGH_WATER_GAUGE = "sglang_overlay_workspace_high_water_bytes"

_said: "set[tuple]" = set()
_lock = threading.Lock()


def warn_once(cause: tuple, message: str, *args) -> None:
    """One WARNING per ``cause`` (``warnings.warn`` would raise under ``-W error``)."""
    with _lock:
        if cause in _said:
            return
        _said.add(cause)
    logger.warning(message, *args)


class ReplacementLog:
    """A workspace's replacements in the log without flooding it: INFO when one passes the
    high-water mark, DEBUG for the others, at most one WARNING a minute while they thrash
    (mixed dtypes or sizes replace the buffer on every call)."""

    def __init__(self, what: str, clock=time.monotonic, thrash_per_minute: int = 100):
        self.what, self._clock, self._thrash = what, clock, thrash_per_minute
        self._lock = threading.Lock()
        self.high_water_bytes, self._in_window, self._window_start = 0, 0, float("-inf")

    def replaced(self, old: str, new: str, new_bytes: int) -> None:
        now = self._clock()
        with self._lock:
            if now - self._window_start >= 60:
                self._window_start, self._in_window = now, 0
            self._in_window += 1
            thrashing = self._in_window == self._thrash + 1  # once a window: a minute apart
            passed = new_bytes > self.high_water_bytes
            self.high_water_bytes = max(self.high_water_bytes, new_bytes)
        if passed:
            logger.info(
                "%s replaced (release-first): %s -> %s; high-water now %.1f MiB",
                self.what, old, new, new_bytes / MIB,
            )  # fmt: skip
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s replaced (release-first): %s -> %s", self.what, old, new)
        if thrashing:
            logger.warning(
                "sglang-overlay: %d %s replacements in the last minute (mixed dtypes or sizes "
                "replace the buffer each time); high-water %.1f MiB",
                self._thrash + 1, self.what, self.high_water_bytes / MIB,
            )  # fmt: skip


def runtime_dir(uid: int) -> Path:
    """``$SGLANG_OVERLAY_RUNTIME_DIR`` (this uid's), else ``/run/user/UID/sglang-overlay``
    where that exists, else a temporary folder."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override and uid == os.getuid():
        return Path(override)
    user_run = Path(f"/run/user/{uid}")
    if user_run.is_dir():
        return user_run / "sglang-overlay"
    return Path(tempfile.gettempdir(), f"sglang-overlay-{uid}")


def folder_problem(folder: Path, uid: int) -> "str | None":
    """Why ``folder`` cannot hold ``uid``'s records (None also when it does not exist yet)."""
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{folder} cannot be read ({exc.strerror})"
    mode = stat.filemode(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a directory ({mode})"
    if info.st_uid != uid:
        return f"{folder} belongs to uid {info.st_uid}, not {uid}"
    if info.st_mode & 0o022:
        return f"{folder} may be written by others ({mode}; it must be 0700)"
    if info.st_mode & 0o700 != 0o700:
        return f"{folder} is not writable by its owner ({mode}; it must be 0700)"
    return None


def start_time(pid: int) -> "str | None":
    """``/proc/PID/stat`` field 22: a record with another belongs to an earlier process."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def write_record(fields: dict) -> None:
    """Replace this process's record with ``fields``, atomically."""
    pid, uid = os.getpid(), os.getuid()
    folder = runtime_dir(uid)
    if not os.path.lexists(folder):
        folder.mkdir(mode=0o700)
    problem = folder_problem(folder, uid)
    if problem is not None:
        raise OverlayError(problem)
    temporary = folder / f".{pid}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({**fields, "pid": pid, "start_time": start_time(pid)}, handle)
    os.replace(temporary, folder / f"{pid}.json")


def read_record(pid: int, uid: int) -> "tuple[dict | None, str | None]":
    """The record of the live process ``pid`` of ``uid`` (or None), and what is wrong with its
    folder or record (or None)."""
    folder = runtime_dir(uid)
    problem = folder_problem(folder, uid)
    if problem is not None:
        return None, f"no record can be kept there: {problem}"
    path = folder / f"{pid}.json"
    try:  # not blocking, a regular file of at most 1 MiB: a FIFO would stop every reader
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ValueError("not a regular file")
            data = handle.read((1 << 20) + 1)
        if len(data) > 1 << 20:
            raise ValueError("larger than 1 MiB")
        record = json.loads(data)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"its record {path} is unreadable ({exc})"
    if not isinstance(record, dict) or record.get("start_time") != start_time(pid):
        return None, None
    patches = record.get("patches")
    if not isinstance(patches, list) or not patches or not all(
        isinstance(p, dict) and all(isinstance(p.get(k), str) for k in ("patch", "state", "reason"))
        for p in patches
    ):  # fmt: skip
        return None, f"its record {path} lists no patch with a state"
    return record, None


def runs_sglang(argv: "list[str]") -> bool:
    """Whether a command line is sglang's: ``sglang serve``, ``sglang::scheduler_TP0``,
    ``python [options] -m sglang...`` or ``python [options] path/to/sglang*``."""
    name = os.path.basename(argv[0]) if argv else ""
    if not name.startswith("python"):
        return _sglang_name(name)
    words = iter(argv[1:])
    for word in words:
        if word in ("-", "--") or not word.startswith("-"):  # the script (or stdin)
            return _sglang_name(os.path.basename(next(words, "") if word == "--" else word))
        # one-letter options run together (-SWignore): -m or -c ends them, -W or -X takes a value
        option = re.match(r"-[^-cmWX]*([cmWX])(.*)", word)
        if option and option[1] == "m":
            return (option[2] or next(words, "")).split(".")[0] == "sglang"
        if option and option[1] == "c":
            return False
        if (option and not option[2]) or word == "--check-hash-based-pycs":
            next(words, None)  # its value is the next word
    return False


def _sglang_name(name: str) -> bool:
    return name.startswith("sglang") and not name.startswith(("sglang-overlay", "sglang_overlay"))


def multiprocess_dir() -> "str | None":  # as prometheus_client reads it
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")


def processes(pids: "set[int] | None" = None) -> "list[dict]":
    """Every live process (of ``pids``) that runs sglang or has a record: pid, command, record
    and its problem. Sweeps the records and gauges of processes that are gone first."""
    for path in runtime_dir(os.getuid()).glob("*.json"):
        if path.stem.isdigit() and read_record(int(path.stem), os.getuid()) == (None, None):
            path.unlink(missing_ok=True)
    folder = multiprocess_dir()
    if folder and os.path.isdir(folder):
        sweep_dead_gauges(folder)
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        pid = int(entry.name) if entry.name.isdigit() else os.getpid()
        if pid == os.getpid() or (pids is not None and pid not in pids):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            argv, uid = [a for a in argv if a], entry.stat().st_uid
        except OSError:  # gone meanwhile, or not ours to read
            continue
        record, problem = read_record(pid, uid)
        if record is not None or runs_sglang(argv):
            found.append(
                {"pid": pid, "command": " ".join(argv), "record": record, "problem": problem}
            )
    return sorted(found, key=lambda p: p["pid"])


_gauges = None  # registered once per process


def set_gauges(patches: "list[dict]", states) -> None:
    """Set this process's gauges. prometheus_client picks its mode when first imported, after
    sglang sets ``PROMETHEUS_MULTIPROC_DIR``: imported here only once either happened."""
    global _gauges
    if _gauges is None:
        folder = multiprocess_dir()
        if "prometheus_client" not in sys.modules and not folder:
            return
        try:
            from prometheus_client import Gauge
        except ImportError:
            return
        _gauges = (
            Gauge(STATE_GAUGE, "sglang-overlay patch state in this process (1 = the state it is in)",
                  ["patch", "state", "overlay_version"], multiprocess_mode="liveall"),
            Gauge(HIGH_WATER_GAUGE, "Largest workspace the patch's method allocated in this "
                  "process, bytes", ["patch"], multiprocess_mode="liveall"),
        )  # fmt: skip
        if folder and os.path.isdir(folder):
            sweep_dead_gauges(folder)
            atexit.register(_mark_dead, folder, os.getpid())
    state_gauge, high_water_gauge = _gauges
    for record in patches:
        for state in states:
            state_gauge.labels(record["patch"], state, __version__).set(state == record["state"])
        high_water_gauge.labels(record["patch"]).set(record["high_water_bytes"])


_LIVE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db")


def sweep_dead_gauges(folder: str) -> None:
    """Remove the gauges of processes that are gone (killed: no exit handler ran) from
    ``folder``, with prometheus_client's own ``mark_process_dead``."""
    from prometheus_client import multiprocess

    found = (_LIVE_FILE.fullmatch(name) for name in os.listdir(folder))
    for pid in {int(f[1]) for f in found if f and not (PROC / f[1]).exists()}:
        multiprocess.mark_process_dead(pid, folder)


def _mark_dead(folder: str, pid: int) -> None:
    if os.getpid() != pid:  # a forked child that inherited the handler: not its gauges
        return
    from prometheus_client import multiprocess

    try:
        multiprocess.mark_process_dead(pid, folder)
    except OSError as exc:  # the folder went away meanwhile
        logger.warning("sglang-overlay: gauges of this process left in %s: %s", folder, exc)


_published = None  # what publish() last wrote, so an unchanged state writes nothing


def publish(patches: "list[dict]", misconfigured: list, states) -> None:
    """Write this process's record and set its gauges when they changed; never raises."""
    global _published
    record = {"patches": patches, "misconfigured": misconfigured, "overlay_version": __version__,
              "overlay_path": os.path.dirname(__file__), "python": sys.executable}  # fmt: skip
    key = json.dumps(record, sort_keys=True)
    if key == _published:
        return
    _published = key
    for what, write in (
        ("record was", lambda: write_record(record)),
        ("gauges were", lambda: set_gauges(patches, states)),
    ):
        try:
            write()
        except Exception as exc:  # inside sglang's import or allocation: never break it
            warn_once(
                (what, type(exc).__name__),
                "sglang-overlay: this process's %s not updated (%s: %s); "
                "status --processes and /metrics may show an older state",
                what, type(exc).__name__, exc,
            )  # fmt: skip


def forget_published() -> bool:  # a forked child publishes when its parent had
    global _published
    had, _published = _published is not None, None
    return had
