"""Run each test file once per side, forked from a ``child.py serve`` of that side (as sglang's
``fork_test_worker``), and keep its log and result channel. A file that must start fresh, or a
side whose preloading failed, forks from a serve that imported nothing. Every file runs in a
session of its own, killed at its end or its timeout."""

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

from ci.evidence.judge import FileRun

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
OUTPUT_TAIL = 64 * 1024  # what the judge quotes of a failed file's output comes from its end
# The sessions running now: Ctrl-C kills them (in sessions of their own, the terminal's SIGINT
# never reaches them) and starts no more.
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: str, limit: int | None = OUTPUT_TAIL) -> str:
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(size - limit if limit is not None and size > limit else 0)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class Worker:
    """One side's ``child.py serve``, preloading ``modules``; ``error`` says why it cannot fork."""

    def __init__(self, modules, env, cwd, timeout_s):
        self.error, self.lock, self.timeout_s = None, threading.Lock(), timeout_s
        self.waiting: dict = {}  # request id -> queue of its answers
        self.ready, self.next_id = queue.SimpleQueue(), 0
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, "serve", str(write), *modules], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, pass_fds=(write,),
        )  # fmt: skip
        os.close(write)
        threading.Thread(target=self._answers, args=(os.fdopen(read, "rb"),), daemon=True).start()
        try:
            said = self.ready.get(timeout=timeout_s)
        except queue.Empty:
            said = {"error": f"not ready in {timeout_s:g} s"}
        if "ready" not in said:
            self.error = str(said["error"])[:500]
            self.stop()

    def _answers(self, answers) -> None:
        with answers:
            for line in answers:
                said = json.loads(line)
                (self.waiting[said["id"]] if "id" in said else self.ready).put(said)
        self.ready.put({"error": "the preloading process ended"})
        for waiting in list(self.waiting.values()):
            waiting.put({"exit": None})

    def run(self, path, mode, log, results) -> FileRun:
        """One file forked from this serve; its exit code None once killed at its timeout."""
        started = time.monotonic()
        with self.lock:
            if _STOPPING.is_set():
                raise KeyboardInterrupt
            self.next_id += 1
            request, answers = self.next_id, queue.SimpleQueue()
            self.waiting[request] = answers
            command = {"id": request, "path": path, "results": results, "log": log}
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        try:
            pid = answers.get(timeout=self.timeout_s).get("pid")
        except queue.Empty:
            pid = None
        if pid is None:
            raise OSError(f"the {mode} preloading process is gone")
        with _LIVE_LOCK:
            _LIVE.add(pid)
            if _STOPPING.is_set():  # Ctrl-C came as it started: nobody else kills it
                _kill_group(pid)
        try:
            returncode = answers.get(timeout=max(0.0, started + self.timeout_s - time.monotonic()))
            returncode = returncode["exit"]
        except queue.Empty:  # its timeout: the serve reaps it once its group is killed
            _kill_group(pid)
            with contextlib.suppress(queue.Empty):
                answers.get(timeout=10)
            returncode = None
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(pid)
        channel = _tail(results, None).splitlines()
        record = None
        if channel and channel[-1].startswith('{"process"'):
            with contextlib.suppress(ValueError, AttributeError, RecursionError):
                record = json.dumps(json.loads(channel.pop())["process"])
        return FileRun(path, mode, returncode, round(time.monotonic() - started, 3),
                       returncode is None, _tail(log), "\n".join(channel), record,
                       f"logs/{os.path.basename(log)}")  # fmt: skip

    def stop(self) -> None:
        _kill_group(self.proc.pid)
        self.proc.wait()


def run_all(paths, envs: dict, cwd: str, timeout_s: float, jobs: int, progress, logs: str,
            preload=(), fresh=()) -> tuple[list[FileRun], dict]:  # fmt: skip
    """Every (file, side) pair, ``jobs`` at a time, in the side's environment from ``envs``;
    ``progress(line)`` hears each end. With ``preload`` a side forks its files, but ``fresh``'s
    (path -> why), from one serve that imported them. The runs, and how each side preloaded."""
    folder = tempfile.mkdtemp(prefix="ci-run-")  # the result channels, private to this run
    workers = (
        {m: Worker(preload, env, cwd, timeout_s) for m, env in envs.items()} if preload else {}
    )
    noted = {"fresh": dict(fresh)} if fresh else {}
    preloads = {m: {"modules": list(preload), "forked": w.error is None, "error": w.error, **noted}
                for m, w in workers.items()}  # fmt: skip
    bare, bare_lock = {}, threading.Lock()  # mode -> a serve that imported nothing, once needed

    def one(path, mode):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", path) + f".{mode}.log"
        log, results = os.path.join(logs, name), os.path.join(folder, name)
        worker = workers.get(mode)
        if worker is not None and worker.error is None and path not in fresh:
            try:
                return worker.run(path, mode, log, results)
            except OSError as exc:  # the preloading process is gone: this file starts fresh
                worker.error = preloads[mode]["error"] = str(exc)
                preloads[mode]["forked"] = False
        with bare_lock:
            if mode not in bare:
                bare[mode] = Worker((), envs[mode], cwd, timeout_s)
        if bare[mode].error is not None:
            raise OSError(f"the {mode} side's test process did not start: {bare[mode].error}")
        return bare[mode].run(path, mode, log, results)

    pool = ThreadPoolExecutor(max_workers=jobs)  # each thread only waits on a child
    try:
        futures = [pool.submit(one, path, mode) for path in paths for mode in envs]
        finished: queue.SimpleQueue = queue.SimpleQueue()
        for future in futures:
            future.add_done_callback(finished.put)
        done = 0  # polled: the kernel may hand Ctrl-C's signal to another thread, and only
        while done < len(futures):  # this (main) one raises it, once it runs again
            with contextlib.suppress(queue.Empty):
                run, done = finished.get(timeout=0.25).result(), done + 1
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
        for worker in [*workers.values(), *bare.values()]:
            worker.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return [future.result() for future in futures], preloads
