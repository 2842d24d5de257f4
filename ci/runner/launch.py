"""Run each test file once per side, forked from a ``child.py`` serve of that side (as sglang's
``fork_test_worker``), and keep its log and result channel. A file that must start fresh, or a
side whose preloading failed, forks from a serve that imported nothing. Every file runs in a
session of its own, killed at its end, its timeout, or when the run stops (Ctrl-C)."""

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
from ci.evidence.model import ProcessEnd

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
OUTPUT_TAIL = 64 * 1024  # what the judge quotes of a failed file's output comes from its end


def _tail(path: str, limit: int | None = OUTPUT_TAIL) -> str:
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(size - limit if limit is not None and size > limit else 0)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class Worker:
    """One side's ``child.py`` serve, preloading ``modules``; ``error`` says why it cannot fork.
    Its input closed (``stop``, or this process gone), it kills every file it forked and ends."""

    def __init__(self, modules, env, cwd, timeout_s):
        self.error, self.lock, self.timeout_s, self.next_id = None, threading.Lock(), timeout_s, 0
        self.waiting = {0: queue.SimpleQueue()}  # request id -> queue of its answers; 0: ready
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, str(write), *modules], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, pass_fds=(write,),
        )  # fmt: skip
        os.close(write)
        threading.Thread(target=self._answers, args=(os.fdopen(read, "rb"),), daemon=True).start()
        try:
            said = self.waiting[0].get(timeout=timeout_s)
        except queue.Empty:
            said = {"error": f"not ready in {timeout_s:g} s"}
        if "ready" not in said:
            self.error = str(said["error"])[:500]
            with contextlib.suppress(ProcessLookupError, PermissionError):  # still importing
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.stop()

    def _answers(self, answers) -> None:
        with answers:
            for line in answers:
                said = json.loads(line)
                self.waiting[said.get("id", 0)].put(said)
        for waiting in list(self.waiting.values()):
            waiting.put({"error": "the preloading process ended"})

    def run(self, path, mode, log, results) -> FileRun:
        """One file forked from this serve; its exit code None once killed at its timeout."""
        started = time.monotonic()
        with self.lock:  # a closed input (Ctrl-C) refuses the write: nothing more starts
            self.next_id += 1
            answers = self.waiting[self.next_id] = queue.SimpleQueue()
            command = {"id": self.next_id, "path": path, "results": results, "log": log}
            command["timeout"] = self.timeout_s
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        said = answers.get()
        if "exit" not in said:
            raise OSError(f"the {mode} preloading process is gone")
        returncode = said["exit"]
        channel = _tail(results, None).splitlines()
        record = channel.pop() if channel and channel[-1].startswith('{"process"') else None
        name, duration = os.path.basename(log), round(time.monotonic() - started, 3)
        end = ProcessEnd(returncode, duration, returncode is None, log=f"logs/{name}")
        return FileRun(path, mode, end, _tail(log), "\n".join(channel), record)

    def stop(self) -> None:
        with self.lock:
            self.proc.stdin.close()
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
    bare = {m: Worker((), env, cwd, timeout_s) for m, env in envs.items()}  # imports nothing

    def one(path, mode):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", path) + f".{mode}.log"
        log, results = os.path.join(logs, name), os.path.join(folder, name)
        worker = workers.get(mode)
        if worker is not None and worker.error is None and path not in fresh:
            try:
                return worker.run(path, mode, log, results)
            except OSError as exc:  # the preloading process is gone: this file starts fresh
                worker.error = str(exc)
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
                state = "timeout" if run.end.timed_out else f"exit {run.end.returncode}"
                line = f"{run.mode:<10} {run.path}: {state} in {run.end.duration_s:.1f}s"
                progress(f"[{done}/{len(futures)}] {line}")
    finally:  # on Ctrl-C too: each serve kills what it forked, and nothing more starts
        for worker in [*workers.values(), *bare.values()]:
            worker.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(folder, ignore_errors=True)
    noted = {"fresh": dict(fresh)} if fresh else {}
    preloads = {m: {"modules": list(preload), "forked": w.error is None, "error": w.error, **noted}
                for m, w in workers.items()}  # fmt: skip
    return [future.result() for future in futures], preloads
