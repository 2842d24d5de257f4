"""Launch one test file in one mode as its own process (``ci/runner/file_process.py``) and keep
what it leaves: its output for the log, never parsed, and its two channels. A test process is PR
code: each pipe is kept up to a bound, and its process group dies with it or at its timeout, so
nothing it left running can hold ``ci run`` up or outlive it.
"""

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ci.evidence.judge import FileRun
from ci.runner import fork_safety

FILE_PROCESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_process.py")
PRELOAD = os.path.join(os.path.dirname(FILE_PROCESS), "preload.py")
# What ci run keeps of each pipe; the rest is read and dropped, so the writer never blocks.
OUTPUT_BYTES = 64 * 1024 * 1024  # the log
CHANNEL_BYTES = 32 * 1024 * 1024  # one line per test; results.json may not pass 32 MiB anyway
RECORD_BYTES = 1024 * 1024  # the environment record: a few hundred bytes
# Once the process group is killed, how long a pipe that a process outside the group (one that
# left the session) still holds may stay open before ci run stops reading it.
DRAIN_S = 10.0
# The test processes running now: on Ctrl-C, ci run kills their process groups (they run in
# sessions of their own, so the terminal's SIGINT never reaches them) and starts no more.
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def run_file(path: str, mode: str, env: dict, cwd: str, timeout_s: float) -> FileRun:
    """``python FILE -v`` (through ``file_process``) in a new session, so what the file
    started dies with it, at its end or its timeout."""
    channel_read, channel_write = os.pipe()
    record_read, record_write = os.pipe()
    fds = ["--results-fd", str(channel_write), "--environment-fd", str(record_write)]
    command = [sys.executable, FILE_PROCESS, *fds, path, "-v"]
    started = time.monotonic()
    try:
        if _STOPPING.is_set():
            raise KeyboardInterrupt
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
        with _LIVE_LOCK:
            _LIVE.add(proc)
            if _STOPPING.is_set():  # Ctrl-C came after the check above: nobody else kills it
                _kill_group(proc)
    finally:
        os.close(channel_write)  # the child holds the only write ends: EOF when it ends
        os.close(record_write)
    output = _Drain(proc.stdout, OUTPUT_BYTES)
    channel = _Drain(os.fdopen(channel_read, "rb", buffering=0), CHANNEL_BYTES)
    record = _Drain(os.fdopen(record_read, "rb", buffering=0), RECORD_BYTES)
    timed_out = not _ended(proc, timeout_s)
    # Whatever the file left running in its session is PR code too and holds its pipes. The
    # file's process is not reaped yet, so the group's id cannot belong to anyone else.
    _kill_group(proc)
    proc.wait()
    with _LIVE_LOCK:
        _LIVE.discard(proc)
    returncode = None if timed_out else proc.returncode
    return _file_run(path, mode, started, returncode, output, channel, record)


def _file_run(path, mode, started, returncode, output, channel, record) -> FileRun:
    """What one file's process left, once it ended (``returncode`` None: at its timeout)."""
    deadline = time.monotonic() + DRAIN_S
    for drain in (output, channel, record):
        drain.join(max(0.0, deadline - time.monotonic()))
    text = output.text()
    if output.size > output.limit:
        text += f"\n[ci run: {output.size - output.limit} more bytes of output dropped]\n"
    if any(drain.is_alive() for drain in (output, channel, record)):
        held = f"still held by a process that left the file's session after {DRAIN_S:g} s"
        text += f"\n[ci run: stopped reading a pipe {held}]\n"
    duration_s = round(time.monotonic() - started, 3)
    timed_out = returncode is None
    return FileRun(
        path, mode, returncode, duration_s, timed_out, text, channel.text(), record.text()
    )


# ---- --preload: one preloading parent per side forks a child per file (ci/runner/preload.py) ----


@dataclass(frozen=True)
class Preloader:
    """One side's preloading parent, or why that side starts each file fresh."""

    mode: str
    modules: tuple
    socket: str | None = None
    proc: subprocess.Popen | None = None
    error: str | None = None

    def record(self) -> dict:
        return {"modules": list(self.modules), "forked": self.error is None, "error": self.error}


@dataclass(frozen=True)
class _Forked:
    pid: int  # a child of a preloading parent, leader of its own session


def start_preloaders(modules, envs: dict, cwd: str, folder: str, timeout_s: float) -> dict:
    """mode -> Preloader, each importing ``modules`` under its mode's environment."""
    started = {}
    for mode, env in envs.items():
        ready_read, ready_write = os.pipe()
        path = os.path.join(folder, f"{mode}.socket")
        command = [sys.executable, PRELOAD, "--socket", path, "--ready-fd", str(ready_write)]
        try:
            proc = subprocess.Popen(
                [*command, *modules],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(ready_write,),
            )
        finally:
            os.close(ready_write)
        started[mode] = (proc, path, _Drain(os.fdopen(ready_read, "rb", buffering=0), 65536))
    preloaders = {}
    for mode, (proc, path, ready) in started.items():
        ready.join(timeout_s)
        try:
            said = json.loads(ready.text() or "{}")
        except ValueError:
            said = {}
        error = said.get("error") if "preloaded" not in said else None
        if error is None and "preloaded" not in said:
            error = f"the preloading process was not ready (exit {proc.poll()})"
        if error is not None:
            _kill_group(proc)
            proc.wait()
            preloaders[mode] = Preloader(mode, tuple(modules), error=str(error)[:500])
        else:
            preloaders[mode] = Preloader(mode, tuple(modules), path, proc)
    return preloaders


def stop_preloaders(preloaders: dict) -> None:
    for preloader in preloaders.values():
        if preloader.proc is not None:
            _kill_group(preloader.proc)
            preloader.proc.wait()


def run_forked(preloader: Preloader, path: str, mode: str, timeout_s: float) -> FileRun:
    """``python FILE -v`` as a child of the side's preloading parent: its own session, output
    pipe, result channel and record, as ``run_file`` gives a fresh interpreter."""
    pipes = [os.pipe() for _ in range(3)]  # output, result channel, record
    started = time.monotonic()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        connection.connect(preloader.socket)
        request = json.dumps({"path": path, "args": ["-v"]}).encode()
        socket.send_fds(connection, [request], [write for _, write in pipes])
    finally:
        for _, write in pipes:
            os.close(write)
    output, channel, record = (
        _Drain(os.fdopen(read, "rb", buffering=0), limit)
        for (read, _), limit in zip(pipes, (OUTPUT_BYTES, CHANNEL_BYTES, RECORD_BYTES), strict=True)
    )
    answers = connection.makefile("rb")
    with connection, answers:
        child = _Forked(json.loads(answers.readline() or "{}").get("pid", 0))
        if not child.pid:
            raise RuntimeError(f"the {mode} preloading parent did not start {path}")
        with _LIVE_LOCK:
            _LIVE.add(child)
            if _STOPPING.is_set():
                _kill_group(child)
        connection.settimeout(max(0.0, timeout_s - (time.monotonic() - started)))
        try:
            ended = json.loads(answers.readline() or "{}")
        except TimeoutError:
            ended = None
        if ended is None or "exit" not in ended:
            # Its timeout, or its parent is gone: the parent reaps a child only once it ended,
            # so the group is still the child's to kill.
            _kill_group(child)
        with _LIVE_LOCK:
            _LIVE.discard(child)
    returncode = None if ended is None else ended.get("exit", -signal.SIGKILL)
    return _file_run(path, mode, started, returncode, output, channel, record)


class _Drain(threading.Thread):
    """Reads one pipe to its end in the background and keeps its first ``limit`` bytes;
    closes it at the end."""

    def __init__(self, pipe, limit: int):
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.start()

    def run(self):
        read = getattr(self.pipe, "read1", self.pipe.read)  # whatever has arrived, up to 64 KiB
        with self.pipe:
            while chunk := read(65536):
                kept = chunk[: max(0, self.limit - self.size)]
                if kept:
                    self.chunks.append(kept)
                self.size += len(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _ended(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether ``proc`` ended within ``timeout_s``; it is left unreaped (a zombie keeps its id,
    which is also its process group's, from being reused)."""
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True


def run_all(
    paths: list[str],
    envs: dict,
    cwd: str,
    timeout_s: float,
    jobs: int,
    progress,
    preload=(),
    preloads: dict | None = None,
) -> list[FileRun]:
    """Every (file, mode) pair, ``jobs`` at a time, each mode with its environment from
    ``envs``; ``progress(line)`` is told as each ends. With ``preload`` (module names) each
    mode forks its files from one process that imported them; ``preloads`` gets mode -> how
    that went (``Preloader.record``)."""
    # Threads are enough: each one only waits on its child process.
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    folder = tempfile.mkdtemp(prefix="ci-run-preload-") if preload else None
    preloaders = start_preloaders(preload, envs, cwd, folder, timeout_s) if preload else {}
    preloads = {} if preloads is None else preloads
    preloads.update({mode: p.record() for mode, p in preloaders.items()})

    def one(path, mode):
        preloader = preloaders.get(mode)
        if preloader is None or preloader.error is not None:
            return run_file(path, mode, envs[mode], cwd, timeout_s)
        why = fork_safety.fresh_reason(os.path.join(cwd, path))
        if why is not None:
            preloads[mode].setdefault("fresh", {})[path] = why
            run = run_file(path, mode, envs[mode], cwd, timeout_s)
            return replace(run, output=f"[ci run: a fresh interpreter: {why}]\n" + run.output)
        try:
            return run_forked(preloader, path, mode, timeout_s)
        except (OSError, RuntimeError, ValueError) as exc:  # the preloading parent is gone
            # The record no longer says every file forked.
            preloads[mode].update(forked=False, error=f"the preloading parent failed: {exc}"[:500])
            preloads[mode].setdefault("fresh", {})[path] = "the preloading parent failed"
            run = run_file(path, mode, envs[mode], cwd, timeout_s)
            why = f"[ci run: the {mode} preloading parent failed ({exc}): ran fresh]\n"
            return replace(run, output=why + run.output)

    try:
        futures = [pool.submit(one, path, mode) for path in paths for mode in envs]
        finished: queue.SimpleQueue = queue.SimpleQueue()
        for future in futures:
            future.add_done_callback(finished.put)
        for done in range(1, len(futures) + 1):
            run = _next(finished).result()
            state = "timeout" if run.timed_out else f"exit {run.returncode}"
            progress(
                f"[{done}/{len(futures)}] {run.mode:<10} {run.path}: {state} "
                f"in {run.duration_s:.1f}s"
            )
    except KeyboardInterrupt:
        # Start no more test processes and kill the groups of those running.
        _STOPPING.set()
        with _LIVE_LOCK:
            live = list(_LIVE)
        for proc in live:
            _kill_group(proc)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        stop_preloaders(preloaders)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return [future.result() for future in futures]


def _next(finished: queue.SimpleQueue):
    """The next future to finish, waited for a quarter second at a time: the kernel may hand
    Ctrl-C's signal to another thread, and then only this (main) thread running again raises
    it; a wait without a timeout would last until a test process ended."""
    while True:
        with contextlib.suppress(queue.Empty):
            return finished.get(timeout=0.25)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
