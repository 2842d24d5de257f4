"""The process a test file runs in under ``ci run`` (after sglang's ``fork_test_worker.py``):
``python FILE -v`` plus a result channel the runner owns; it imports nothing of the bot.

``child.py FD MODULE...`` imports MODULEs once, answers ``{"ready"}`` on FD, then per JSON line
``{"id", "path", "results", "log", "timeout"}`` on stdin forks a child in its own session and
answers ``{"id", "exit"}`` once the child ended and its session was killed (``exit`` null past
its timeout). The end of stdin kills every child still running. The child writes each finished
test as one JSON line on ``results`` (each call of a test method, so that a retry is seen), then
``{"process": {...}}``, what it ran with.
"""

import atexit
import contextlib
import functools
import inspect
import json
import os
import runpy
import select
import signal
import sys
import time
import traceback
import unittest

DETAIL_CHARS = 8000  # a traceback's end is where it says what failed
MAX_ATTEMPTS = 20
UNOBSERVED = "passed, but no call of its method was seen: a retry there would be invisible"


class Channel:
    """One JSON line per finished test; lines from a process the file forked are dropped."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.pid, self.started = os.getpid(), {}

    def start(self, test_id: str) -> None:
        self.started[test_id] = time.monotonic()
        _cuda("reset_peak_memory_stats")

    def send(self, test_id, outcome, detail="", attempts=(), unobserved=False) -> None:
        if os.getpid() != self.pid:
            return
        started = self.started.pop(test_id, None)
        line = {
            "test": test_id,
            "outcome": outcome,
            "duration_s": None if started is None else round(time.monotonic() - started, 3),
            "detail": str(detail)[-DETAIL_CHARS:],
            "attempts": list(attempts)[:MAX_ATTEMPTS],
        }
        # Without a CUDA context the peak is what the file measured itself (PEAKS_MIB on
        # __main__, by method), as the CPU proofs do.
        peak = _cuda("max_memory_allocated")
        if None not in (started, peak):
            line["peak_mib"] = round(peak / 2**20, 2)
        else:
            peaks = getattr(sys.modules.get("__main__"), "PEAKS_MIB", None)
            value = peaks.get(test_id.rpartition(".")[2]) if isinstance(peaks, dict) else None
            if isinstance(value, (int, float)):
                line["peak_mib"] = round(float(value), 2)
        self.write({**line, "unobserved": True} if unobserved else line)

    def write(self, line: dict) -> None:
        os.write(self.fd, (json.dumps(line, default=str) + "\n").encode())


def _cuda(call: str):
    """``torch.cuda.<call>()`` where this process holds a CUDA context the file made."""
    torch = sys.modules.get("torch")
    try:
        return getattr(torch.cuda, call)() if torch and torch.cuda.is_initialized() else None
    except RuntimeError as exc:  # the test broke the device: no peak, said
        print(f"ci child: torch.cuda.{call}() raised {exc!r}", file=sys.stderr)


def unittest_id(test) -> str:
    """``Class.test_name``; ``Class.setUpClass`` (or the module's name) for a fixture."""
    method = getattr(test, "_testMethodName", None)
    if method is not None:
        return f"{type(test).__name__}.{method}"
    fixture, _, where = str(test).partition(" (")
    if fixture in ("setUpClass", "tearDownClass"):
        return f"{where.rstrip(')').split('.')[-1]}.{fixture}"
    return str(test)


def _counting(method, calls: list, failure):
    """``method``, appending each call's outcome to ``calls``; a coroutine function stays one,
    so an asyncio test case still awaits it."""

    @contextlib.contextmanager
    def counted():
        try:
            yield
        except unittest.SkipTest:
            raise
        except BaseException as exc:
            outcome = "fail" if isinstance(exc, failure) else "error"
            calls.append((outcome, "".join(traceback.format_exception(exc))))
            raise
        calls.append(("pass", ""))

    async def awaited(*args, **kwargs):
        with counted():
            return await method(*args, **kwargs)

    def called(*args, **kwargs):
        with counted():
            return method(*args, **kwargs)

    return functools.wraps(method)(awaited if inspect.iscoroutinefunction(method) else called)


def retried(outcome: str, detail: str, calls):
    """(detail, attempts, unobserved) of a finished test from its ``calls`` (None: unseen)."""
    if outcome == "pass" and not calls:
        return UNOBSERVED, [], True
    failures = [(n, d) for n, (o, d) in enumerate(calls or (), 1) if o != "pass"]
    if outcome == "pass" and failures and calls[-1][0] == "pass":
        number, first = failures[0]
        detail = f"attempt {number} of {len(calls)} failed, the last passed:\n{first}"
    elif outcome == "error" and failures and failures[-1][1]:
        detail = failures[-1][1]  # the assertion itself, not the retry's wrapper around it
    return detail, [o for o, _ in calls or ()], False


def hook_unittest(channel: Channel, calls: dict) -> None:
    """Count each call of every test's method (the instance holds a counting wrapper while its
    run lasts, whoever calls it: TestCase, an asyncio case, sglang's CustomTestCase retry) and
    report each test at stopTest, a class or module fixture at once."""
    run, result = unittest.case.TestCase.run, unittest.result.TestResult
    ended: dict = {}  # test id -> (outcome, detail) so far

    def counted_run(test, result=None):
        name = getattr(test, "_testMethodName", None)
        method = getattr(test, name, None) if isinstance(name, str) else None
        if method is None:
            return run(test, result)
        own = test.__dict__.get(name)  # pytest sets the method on the instance
        counted = calls.setdefault(unittest_id(test), [])
        setattr(test, name, _counting(method, counted, test.failureException))
        try:
            return run(test, result)
        finally:
            test.__dict__.pop(name, None)
            if own is not None:
                test.__dict__[name] = own

    def record(self, test, outcome, err=None, text=None):
        if err is not None:
            text = self._exc_info_to_string(err, test)
        test_id = unittest_id(test)
        if not hasattr(test, "_testMethodName"):
            channel.send(test_id, outcome, text or "")
        elif test_id not in ended or ended[test_id][0] == "pass":
            ended[test_id] = (outcome, text or "")

    def stop_test(self, test):
        test_id = unittest_id(test)
        outcome, detail = ended.pop(test_id, ("error", "the test ended without a result"))
        channel.send(test_id, outcome, *retried(outcome, detail, calls.pop(test_id, None)))

    def sub_test(self, test, subtest, err):
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            record(self, test, "fail" if failed else "error", err)

    hooks = {
        "startTest": lambda self, test: channel.start(unittest_id(test)),
        "stopTest": stop_test,
        "addSuccess": lambda self, test: record(self, test, "pass"),
        "addExpectedFailure": lambda self, test, err: record(self, test, "pass", err),
        "addFailure": lambda self, test, err: record(self, test, "fail", err),
        "addError": lambda self, test, err: record(self, test, "error", err),
        "addSkip": lambda self, test, why: record(self, test, "skip", text=why),
        "addUnexpectedSuccess": lambda self, test: record(
            self, test, "fail", text="unexpected success"
        ),
        "addSubTest": sub_test,
    }
    for name, hook in hooks.items():
        original = getattr(result, name)
        setattr(result, name, functools.partialmethod(_then, hook, original))
    unittest.case.TestCase.run = counted_run


def _then(self, hook, original, *args):
    hook(self, *args)
    return original(self, *args)


class PytestResults:
    """One result per test item from its setup, call and teardown reports."""

    def __init__(self, channel: Channel, calls: dict):
        self.channel, self.calls, self.reports = channel, calls, {}

    @staticmethod
    def test_id(nodeid: str) -> str:
        return nodeid.split("::", 1)[-1].replace("::", ".")

    def pytest_runtest_logstart(self, nodeid, location):
        self.channel.start(self.test_id(nodeid))

    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome, detail = "pass", ""
        for report in self.reports.pop(nodeid, []):
            if report.failed:
                outcome = "fail" if report.when == "call" else "error"
                detail = report.longreprtext
                break
            if report.skipped:
                skip = report.longrepr
                outcome = "skip"
                detail = skip[2] if isinstance(skip, tuple) and len(skip) == 3 else str(skip)
                detail = detail.removeprefix("Skipped: ")
        test_id = self.test_id(nodeid)
        counted = self.calls.pop(test_id, None)  # None: not a unittest case, whose calls count
        found = (detail,) if counted is None else retried(outcome, detail, counted)
        self.channel.send(test_id, outcome, *found)

    def pytest_collectreport(self, report):
        if report.failed:
            where = f"collecting {report.nodeid or 'the file'}"
            self.channel.send(where, "error", report.longreprtext)


def _with_results(real, channel, calls, args=None, plugins=None, **kwargs):
    """``pytest.main`` with ``PytestResults`` among its plugins."""
    return real(args, [*(plugins or ()), PytestResults(channel, calls)], **kwargs)


def describe(preloaded=()) -> dict:
    """What this process ran with, as far as the file imported it (nothing is imported here)."""
    torch, sglang = sys.modules.get("torch"), sys.modules.get("sglang")
    info = {"python": sys.version.split()[0], "preloaded": ",".join(preloaded) or None}
    if torch is not None:
        info.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=_cuda("get_device_name"))
    if sglang is not None:
        info["sglang"] = getattr(sglang, "__version__", None)
        info["sglang_path"] = getattr(sglang, "__file__", None)
    return {k: v for k, v in info.items() if v is not None}


# ---- serve: one preloaded parent per side, a fork per file ----


def serve(modules, answers: int) -> None:
    def answer(message):
        os.write(answers, (json.dumps(message) + "\n").encode())

    for name in modules:
        try:
            __import__(name)
        except BaseException as exc:
            return answer({"error": f"preloading {name}: {type(exc).__name__}: {exc}"})
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return answer({"error": "CUDA was initialised while preloading: a fork cannot use it"})
    answer({"ready": list(modules)})
    children, buffer, reading = {}, b"", True  # pid -> (request id, deadline)
    while reading or children:
        ready, _, _ = select.select([0] if reading else [], [], [], 0.05)
        if ready:
            data = os.read(0, 65536)
            reading, buffer = bool(data), buffer + data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                command = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.setsid()
                    _forked(command, modules, answers)
                children[pid] = (command["id"], time.monotonic() + command["timeout"])
        # Killed again at each pass until reaped: a child not yet in its session is next time.
        for pid, (_, deadline) in children.items():
            if not reading or time.monotonic() > deadline:  # the runner stopped, or its timeout
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        while children:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if ended is None:
                break
            with contextlib.suppress(ProcessLookupError):  # unreaped, the group is still its
                os.killpg(ended.si_pid, signal.SIGKILL)
            _, status = os.waitpid(ended.si_pid, 0)
            if ended.si_pid in children:
                request, deadline = children.pop(ended.si_pid)
                code = None if time.monotonic() > deadline else os.waitstatus_to_exitcode(status)
                answer({"id": request, "exit": code})


def _forked(command: dict, modules, answers: int) -> None:
    """The forked child: ``command["path"]`` run as ``python FILE -v`` runs it, its output in
    the log, its tests on its result channel, then what it ran with; it never returns."""
    code, path = 1, command["path"]
    try:
        log = os.open(command["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        for fd, to in ((devnull, 0), (log, 1), (log, 2)):
            os.dup2(fd, to)
        for fd in (devnull, log, answers):
            os.close(fd)
        channel, calls = Channel(command["results"]), {}
        hook_unittest(channel, calls)
        try:  # a file that runs pytest.main names pytest: imported only then (it costs a start-up)
            with open(path, "rb") as source:
                if b"pytest" in source.read():
                    import pytest

                    pytest.main = functools.partial(_with_results, pytest.main, channel, calls)
        except (OSError, ImportError):
            pass  # python FILE says what is wrong with an unreadable file; no pytest, no plugin
        sys.argv = [path, "-v"]
        sys.path[0] = os.path.dirname(os.path.realpath(path))  # as ``python FILE`` sets it
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as exc:  # as the interpreter exits: a code, None, or a message
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            if code and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        if os.getpid() == channel.pid:  # the starting process's record, not a fork's
            channel.write({"process": describe(modules)})
    finally:
        try:
            atexit._run_exitfuncs()  # as the interpreter's own exit would
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


if __name__ == "__main__":  # child.py FD MODULE..., only as launch.py starts it
    serve(sys.argv[2:], int(sys.argv[1]))
