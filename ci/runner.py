"""Run each selected test file as its own fresh ``python FILE -v --result-fd N`` process, in
each mode, through ``ci/file_process.py`` (CUDA left uninitialised through the imports, so the
file can fork its CUDA cases; it also reports what the process ran with).

For launching and timing processes only: it knows the two modes' environments, scrubs secrets
from them, enforces the per-file timeout, keeps the raw output for the logs and collects what
the file writes on its result channel (one JSON line per test, read by ``case_result``) and the
process's environment record (read by ``environment``); the output is never parsed. Deciding
what the results mean is ``results``'.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

MODES = ("unmodified", "change")
DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"
RESULT_FD_FLAG = "--result-fd"  # the registered test's result channel
FILE_PROCESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_process.py")
# Anything that looks like a credential stays out of the test processes: they run PR code.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY", re.I)


@dataclass
class FileRun:
    """The raw outcome of one file in one mode."""

    path: str
    mode: str
    returncode: int | None
    duration_s: float
    timed_out: bool
    output: str
    chunk_times: list[tuple[int, float]] = field(default_factory=list)
    channel: str = ""  # what the file wrote on its result channel: one JSON line per test
    environment: str = ""  # what its process wrote about itself (ci/file_process.py), raw


def scrubbed_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if _SECRET_NAME.search(name):
            del env[name]
    return env


def mode_env(mode: str, sglang_src: str | None = None, base: dict | None = None) -> dict:
    """The environment one mode runs under.

    unmodified: the installed sglang with the overlay turned off. change: the overlay on; or,
    with ``sglang_src``, a patched upstream checkout first on PYTHONPATH and the overlay off, so
    the proof runs against the patch itself rather than the runtime overlay.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    env = scrubbed_env(base)
    env.pop(DISABLE_ENV, None)
    env["PYTHONUNBUFFERED"] = "1"
    # One malloc arena from the start: the registered CPU cases fork from the test process and
    # cap their address space, which other threads' arenas would otherwise take up.
    env["MALLOC_ARENA_MAX"] = "1"
    if mode == "unmodified":
        env[DISABLE_ENV] = "1"
    elif sglang_src:
        env[DISABLE_ENV] = "1"
        src = os.path.join(os.path.abspath(sglang_src), "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def run_file(path: str, mode: str, env: dict, cwd: str, timeout_s: float) -> FileRun:
    """``python FILE -v --result-fd N`` (through ``file_process``) in a new session, so a
    timeout can kill the test's children too."""
    channel_read, channel_write = os.pipe()
    record_read, record_write = os.pipe()
    command = [
        sys.executable,
        FILE_PROCESS,
        "--environment-fd",
        str(record_write),
        path,
        "-v",
        RESULT_FD_FLAG,
        str(channel_write),
    ]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(channel_write, record_write),
        )
    finally:
        os.close(channel_write)  # the child holds the only write ends: EOF when it ends
        os.close(record_write)
    channel: list[bytes] = []
    record: list[bytes] = []
    drains = [
        threading.Thread(target=_read_all, args=(fd, into), daemon=True)
        for fd, into in ((channel_read, channel), (record_read, record))
    ]
    for drain in drains:
        drain.start()
    chunks: list[bytes] = []
    times: list[tuple[int, float]] = []

    def pump():
        size = 0
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                return
            times.append((size, time.monotonic() - started))
            chunks.append(chunk)
            size += len(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    reader.join(timeout=10)
    for drain in drains:
        drain.join(timeout=10)
    raw = b"".join(chunks)
    text, char_times = _decode_with_offsets(raw, times)
    return FileRun(
        path=path,
        mode=mode,
        returncode=None if timed_out else proc.returncode,
        duration_s=round(time.monotonic() - started, 3),
        timed_out=timed_out,
        output=text,
        chunk_times=char_times,
        channel=b"".join(channel).decode("utf-8", errors="replace"),
        environment=b"".join(record).decode("utf-8", errors="replace"),
    )


def _read_all(fd: int, into: list) -> None:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            into.append(chunk)


def run_all(
    paths: list[str],
    modes: list[str],
    cwd: str,
    timeout_s: float,
    jobs: int,
    sglang_src: str | None = None,
    progress=None,
) -> list[FileRun]:
    """Every (file, mode) pair, ``jobs`` at a time; ``progress(line)`` is told as each ends."""
    pairs = [(path, mode) for path in paths for mode in modes]
    envs = {mode: mode_env(mode, sglang_src) for mode in modes}
    runs = []
    # Threads are enough: each one only waits on its child process.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(run_file, path, mode, envs[mode], cwd, timeout_s): (path, mode)
            for path, mode in pairs
        }
        for done, future in enumerate(as_completed(futures), 1):
            run = future.result()
            runs.append(run)
            if progress:
                state = "timeout" if run.timed_out else f"exit {run.returncode}"
                progress(
                    f"[{done}/{len(pairs)}] {run.mode:<10} {run.path}: {state} "
                    f"in {run.duration_s:.1f}s"
                )
    order = {pair: i for i, pair in enumerate(pairs)}
    return sorted(runs, key=lambda r: order[(r.path, r.mode)])


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _decode_with_offsets(raw: bytes, times: list[tuple[int, float]]):
    """Decode once, and map each chunk's byte offset to a character offset."""
    text = raw.decode("utf-8", errors="replace")
    if raw.isascii():
        return text, times
    return text, [(len(raw[:offset].decode("utf-8", errors="replace")), t) for offset, t in times]
