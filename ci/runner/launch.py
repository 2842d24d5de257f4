"""Start each test file once per side as ``ci/runner/child.py`` and keep what it leaves: its
output, written straight to its log, and its result channel, read once it ended. A side with
modules to preload forks its files from one ``child.py serve`` process that imported them (as
sglang's ``fork_test_worker`` does); a file that must start fresh, or a side whose preloading
failed, starts a new interpreter. Every file runs in a session of its own, killed at its end or
its timeout, so nothing it left running outlives it.
"""

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ci.evidence.judge import FileRun

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
OUTPUT_TAIL = 64 * 1024  # what the judge quotes of a failed file's output comes from its end
# The sessions of the test processes running now: Ctrl-C kills them (they run in sessions of
# their own, so the terminal's SIGINT never reaches them) and starts no more.
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _started(pid: int) -> None:
    with _LIVE_LOCK:
        _LIVE.add(pid)
        if _STOPPING.is_set():  # Ctrl-C came as it started: nobody else kills it
            _kill_group(pid)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def log_name(path: str, mode: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path) + f".{mode}.log"


def run_fresh(path, mode, env, cwd, timeout_s, log, results) -> FileRun:
    """``python child.py run RESULTS FILE -v`` in a new session, its output to ``log``."""
    started = time.monotonic()
    if _STOPPING.is_set():
        raise KeyboardInterrupt
    with open(log, "ab") as output:
        proc = subprocess.Popen(
            [sys.executable, CHILD, "run", results, path, "-v"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _started(proc.pid)
    # Left unreaped until its group is killed: a zombie keeps the group's id from being reused.
    deadline, pause, ended = started + timeout_s, 0.001, True
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            ended = False
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    _kill_group(proc.pid)
    proc.wait()
    with _LIVE_LOCK:
        _LIVE.discard(proc.pid)
    return file_run(path, mode, started, proc.returncode if ended else None, log, results)


class Worker:
    """One side's ``child.py serve``: started with the side's environment, preloading
    ``modules``; ``error`` says why it cannot fork (then its files start fresh)."""

    def __init__(self, modules, env, cwd, timeout_s):
        self.modules, self.error, self.lock = tuple(modules), None, threading.Lock()
        self.waiting: dict = {}  # request id -> queue of its answers
        self.ready, self.next_id = queue.SimpleQueue(), 0
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, CHILD, "serve", str(write), *self.modules],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(write,),
            )
        finally:
            os.close(write)
        threading.Thread(target=self._answers, args=(os.fdopen(read, "rb"),), daemon=True).start()
        try:
            said = self.ready.get(timeout=timeout_s)
        except queue.Empty:
            said = {"error": f"not ready in {timeout_s:g} s"}
        if "ready" not in said:
            self.error = str(said.get("error") or "the preloading process ended")[:500]
            self.stop()

    def _answers(self, answers) -> None:
        with answers:
            for line in answers:
                said = json.loads(line)
                if "id" in said:
                    self.waiting[said["id"]].put(said)
                else:
                    self.ready.put(said)
        self.ready.put({"error": "the preloading process ended"})
        for waiting in list(self.waiting.values()):
            waiting.put({"exit": None})

    def record(self) -> dict:
        return {"modules": list(self.modules), "forked": self.error is None, "error": self.error}

    def run(self, path, mode, timeout_s, log, results) -> FileRun:
        started = time.monotonic()
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        with self.lock:
            self.next_id += 1
            request, answers = self.next_id, queue.SimpleQueue()
            self.waiting[request] = answers
            command = {"id": request, "path": path, "args": ["-v"], "results": results, "log": log}
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        try:
            pid = answers.get(timeout=timeout_s).get("pid")
        except queue.Empty:
            pid = None
        if pid is None:
            raise OSError(f"the {mode} preloading process is gone")
        _started(pid)
        try:
            said = answers.get(timeout=max(0.0, started + timeout_s - time.monotonic()))
        except queue.Empty:  # its timeout: the worker reaps it once its group is killed
            _kill_group(pid)
            with contextlib.suppress(queue.Empty):
                answers.get(timeout=10)
            said = {"exit": None}
        with _LIVE_LOCK:
            _LIVE.discard(pid)
        return file_run(path, mode, started, said["exit"], log, results)

    def stop(self) -> None:
        _kill_group(self.proc.pid)
        self.proc.wait()


def file_run(path, mode, started, returncode, log, results) -> FileRun:
    """What one file's process left (``returncode`` None: killed at its timeout)."""
    output = _tail(log)
    channel = _tail(results, None).splitlines()
    record = None
    if channel and channel[-1].startswith('{"process"'):
        with contextlib.suppress(ValueError, AttributeError):
            record = json.dumps(json.loads(channel.pop())["process"])
    duration_s = round(time.monotonic() - started, 3)
    timed_out = returncode is None
    return FileRun(
        path, mode, returncode, duration_s, timed_out, output, "\n".join(channel), record
    )


def _tail(path: str, limit: int | None = OUTPUT_TAIL) -> str:
    try:
        with open(path, "rb") as handle:
            if limit is not None and handle.seek(0, os.SEEK_END) > limit:
                handle.seek(-limit, os.SEEK_END)
            else:
                handle.seek(0)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_all(paths, envs: dict, cwd: str, timeout_s: float, jobs: int, progress, logs: str,
            preload=(), fresh=None) -> tuple[list[FileRun], dict]:  # fmt: skip
    """Every (file, side) pair, ``jobs`` at a time, each side with its environment from
    ``envs``; ``progress(line)`` is told as each ends. With ``preload`` (module names) a side
    forks its files but those in ``fresh`` (path -> why) from one process that imported them.
    Returns the runs and, per side, how its preloading went."""
    fresh = fresh or {}
    folder = tempfile.mkdtemp(prefix="ci-run-")  # the result channels, private to this run
    workers = (
        {m: Worker(preload, env, cwd, timeout_s) for m, env in envs.items()} if preload else {}
    )
    preloads = {mode: w.record() for mode, w in workers.items()}

    def one(path, mode):
        name = log_name(path, mode)
        log, results = os.path.join(logs, name), os.path.join(folder, name)
        worker = workers.get(mode)
        if worker is None or worker.error is not None or path in fresh:
            if worker is not None and path in fresh:
                preloads[mode].setdefault("fresh", {})[path] = fresh[path]
            run = run_fresh(path, mode, envs[mode], cwd, timeout_s, log, results)
        else:
            try:
                run = worker.run(path, mode, timeout_s, log, results)
            except OSError as exc:  # the preloading process is gone: this file starts fresh
                worker.error = preloads[mode]["error"] = str(exc)
                preloads[mode]["forked"] = False
                run = run_fresh(path, mode, envs[mode], cwd, timeout_s, log, results)
        return replace(run, log=f"logs/{name}")

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))  # each thread only waits on a child
    try:
        futures = [pool.submit(one, path, mode) for path in paths for mode in envs]
        finished: queue.SimpleQueue = queue.SimpleQueue()
        for future in futures:
            future.add_done_callback(finished.put)
        for done in range(1, len(futures) + 1):
            run = _next(finished).result()
            state = "timeout" if run.timed_out else f"exit {run.returncode}"
            line = f"{run.mode:<10} {run.path}: {state} in {run.duration_s:.1f}s"
            progress(f"[{done}/{len(futures)}] {line}")
    except KeyboardInterrupt:
        _STOPPING.set()
        with _LIVE_LOCK:
            live = list(_LIVE)
        for pid in live:
            _kill_group(pid)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for worker in workers.values():
            worker.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return [future.result() for future in futures], preloads


def _next(finished: queue.SimpleQueue):
    """The next future to finish, waited for a quarter second at a time: the kernel may hand
    Ctrl-C's signal to another thread, and only this (main) thread running again raises it."""
    while True:
        with contextlib.suppress(queue.Empty):
            return finished.get(timeout=0.25)
