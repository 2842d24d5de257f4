"""The process one test file runs in under ``ci run``: ``python FILE ARGS...`` plus a result
channel the runner owns, so the file stays exactly as upstream writes it.

``python ci/runner/file_process.py --results-fd N --environment-fd M FILE ARGS...`` runs FILE as
``__main__`` the way ``python FILE ARGS...`` does, reports each finished test as one JSON line on
fd N through hooks installed from outside (unittest's result class, and each call of a test
method, counted from the method's side by its sibling ``attempts.py``, so a retry inside the
test case is seen whichever way it calls the method; a plugin handed to ``pytest.main``), with
the CUDA peak where the process holds a CUDA context, and writes one record about the process
to fd M at the end, with how many results it wrote (ci/README.md says what each holds). It
imports nothing of this project but that sibling (loaded by its path), nor torch or sglang: it
is the PR's process.
"""

import builtins
import importlib.util
import json
import os
import sys
import time
import types
import unittest
from importlib.machinery import SourceFileLoader

DETAIL_CHARS = 8000  # a traceback's end is where it says what failed
MAX_ATTEMPTS = 20  # calls of one test method the channel reports (ci.evidence.model's bound)
BACKEND_ENV = "SGLANG_OVERLAY_CI_BACKEND"  # the backend ci run measures: cpu or cuda
MIB = float(1 << 20)


class Channel:
    """One JSON line per finished test on a file descriptor; writes from a forked child of
    the file are dropped, so each test is reported once."""

    def __init__(self, fd: int):
        self.fd, self.pid, self.started = fd, os.getpid(), {}
        self.sent = 0  # lines this channel wrote: the record says how many (ci.evidence.judge)

    def start(self, test_id: str) -> None:
        self.started[test_id] = time.monotonic()
        _cuda("reset_peak_memory_stats")

    def send(self, test_id, outcome, detail="", attempts=(), unobserved=False) -> None:
        if os.getpid() != self.pid:
            return
        started = self.started.pop(test_id, None)
        record = {
            "test": test_id,
            "outcome": outcome,
            "duration_s": None if started is None else round(time.monotonic() - started, 3),
            "detail": str(detail)[-DETAIL_CHARS:],
            "attempts": list(attempts)[:MAX_ATTEMPTS],
        }
        # A CPU run's peak is what the file measured itself: a process that merely holds a
        # CUDA context (importing sglang makes one on a GPU host) measured no CUDA memory.
        cuda = started is not None and os.environ.get(BACKEND_ENV) != "cpu"
        peak = _cuda("max_memory_allocated") if cuda else None
        if peak is not None:
            record["peak_mib"] = round(peak / MIB, 2)
        elif (published := _published_peak(test_id)) is not None:
            record["peak_mib"] = published
        if unobserved:
            record["unobserved"] = True
        with open(self.fd, "wb", closefd=False) as channel:  # flushed whole as it closes
            channel.write((json.dumps(record) + "\n").encode())
        self.sent += 1


def _cuda(call: str):
    """``torch.cuda.<call>()`` where the file imported torch and this process holds a CUDA
    context (never made here); None otherwise, or where it fails."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return getattr(torch.cuda, call)()
    except RuntimeError as exc:  # a CUDA error (the test broke the device): no peak, said
        print(f"file_process: torch.cuda.{call}() raised {exc!r}", file=sys.stderr)
    return None


def _published_peak(test_id: str):
    """The peak in MiB the file measured itself, where it has no CUDA one: ``PEAKS_MIB`` on
    ``__main__``, keyed by test method name (the project's CPU proof publishes its live-memory
    peaks there); None when absent or not a number."""
    peaks = getattr(sys.modules.get("__main__"), "PEAKS_MIB", None)
    value = peaks.get(test_id.rpartition(".")[2]) if isinstance(peaks, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e7:
        return round(float(value), 2)
    return None


# ---- unittest: hooks on the base result class, which every runner's result calls ----


def _sibling(name: str):
    """A module of this folder, loaded by its path under a private name: the PR's process has
    no package of this project on its path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_sglang_overlay_ci_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


attempts_module = _sibling("attempts")
Attempts, retried, unittest_id = (
    attempts_module.Attempts,
    attempts_module.retried,
    attempts_module.unittest_id,
)


def hook_unittest(channel: Channel, attempts: Attempts) -> None:
    result = unittest.result.TestResult
    # test id -> (outcome, detail) so far; sent at stopTest, or at once for a fixture.
    ended: dict = {}

    def record(test, outcome, detail=""):
        test_id = unittest_id(test)
        if not hasattr(test, "_testMethodName"):  # a class or module fixture: no stopTest
            channel.send(test_id, outcome, detail)
        elif test_id not in ended or ended[test_id][0] == "pass":
            ended[test_id] = (outcome, detail)

    def err_text(self, err, test):
        try:
            return self._exc_info_to_string(err, test)
        except Exception as exc:
            return f"{err[0].__name__ if err else 'error'} ({type(exc).__name__} formatting it)"

    def stop_test(self, test):
        test_id = unittest_id(test)
        outcome, detail = ended.pop(test_id, ("error", "the test ended without a result"))
        detail, calls, unobserved = retried(outcome, detail, attempts.end(test_id))
        channel.send(test_id, outcome, detail, calls, unobserved)

    def add_sub_test(self, test, subtest, err):
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            detail = f"{subtest}\n{err_text(self, err, subtest)}"
            record(test, "fail" if failed else "error", detail)

    def failed(outcome):
        return lambda self, test, err: record(test, outcome, err_text(self, err, test))

    hooks = {
        "startTest": lambda self, test: channel.start(unittest_id(test)),
        "stopTest": stop_test,
        "addSuccess": lambda self, test: record(test, "pass"),
        "addExpectedFailure": failed("pass"),
        "addFailure": failed("fail"),
        "addError": failed("error"),
        "addSkip": lambda self, test, reason: record(test, "skip", reason),
        "addUnexpectedSuccess": lambda self, test: record(test, "fail", "unexpected success"),
        "addSubTest": add_sub_test,
    }
    for name, hook in hooks.items():
        setattr(result, name, _then_original(hook, getattr(result, name)))
    attempts.hook_run()


def _then_original(hook, original):
    def hooked(self, *args):
        hook(self, *args)
        return original(self, *args)

    return hooked


# ---- pytest: a plugin handed to pytest.main ----


class PytestResults:
    """pytest hooks: one result per test item from its setup, call and teardown reports."""

    def __init__(self, channel: Channel, attempts: Attempts):
        self.channel, self.reports, self.attempts = channel, {}, attempts
        self.unittest_items: set = set()  # unittest test cases pytest collected: their attempts

    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            cls = getattr(item, "cls", None)
            if isinstance(cls, type) and issubclass(cls, unittest.TestCase):
                self.unittest_items.add(item.nodeid)

    @staticmethod
    def test_id(nodeid: str) -> str:
        return nodeid.split("::", 1)[-1].replace("::", ".")

    def pytest_runtest_logstart(self, nodeid, location):
        self.channel.start(self.test_id(nodeid))

    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        reports = self.reports.pop(nodeid, [])
        outcome, detail = "pass", ""
        for report in reports:
            if report.failed:
                outcome = "fail" if report.when == "call" else "error"
                detail = report.longreprtext
                break
            if report.skipped:
                skip = report.longrepr
                outcome = "skip"
                detail = skip[2] if isinstance(skip, tuple) and len(skip) == 3 else str(skip)
                detail = detail.removeprefix("Skipped: ")
        test_id, calls, unobserved = self.test_id(nodeid), [], False
        counted = self.attempts.end(test_id)
        if nodeid in self.unittest_items:  # run by TestCase.run: its attempts were counted
            detail, calls, unobserved = retried(outcome, detail, counted)
        self.channel.send(test_id, outcome, detail, calls, unobserved)

    def pytest_collectreport(self, report):
        if report.failed:
            self.channel.send(
                f"collecting {report.nodeid or 'the file'}", "error", report.longreprtext
            )


def hook_pytest(pytest, channel: Channel, attempts: Attempts) -> None:
    """Wrap ``pytest.main`` so that every call gets the plugin (idempotent)."""
    real = pytest.main
    if getattr(real, "_abtest_results", False):
        return

    def main(args=None, plugins=None, **kwargs):
        return real(args, [*(plugins or ()), PytestResults(channel, attempts)], **kwargs)

    main._abtest_results = True
    main.__wrapped__ = real
    pytest.main = main


class AfterImport:
    """Meta-path finder for one module: hands back its real spec with the loader wrapped, so
    ``then(module)`` runs right after the module executes. ``find_spec`` imports nothing and
    never touches ``sys.meta_path`` (importlib holds its lock there)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        finders = list(sys.meta_path)
        for finder in finders[finders.index(self) + 1 if self in finders else 0 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = ThenLoader(spec.loader, self.then)
                return spec
        return None


class ThenLoader:
    """A module's own loader, then a hook; otherwise indistinguishable from it."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def __getattr__(self, name):
        if name in ("loader", "then"):  # not set yet (copy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None and module.__spec__.loader is self:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.then(module)
        except AttributeError as exc:  # a pytest without main(): its tests go unreported
            print(f"file_process: pytest results not reported: {exc!r}", file=sys.stderr)


# ---- the process record ----


def describe_process() -> dict:
    """What this process ran with; a part that cannot be read says why instead of failing."""
    info: dict = {"python": sys.version.split()[0]}
    torch = sys.modules.get("torch")
    if torch is None:
        info["torch_error"] = "torch was not imported"
    else:
        try:
            info["torch"] = torch.__version__
            info["cuda"] = torch.version.cuda
            if torch.cuda.is_initialized():
                info["gpu"] = torch.cuda.get_device_name()
        except Exception as exc:
            info["torch_error"] = f"{type(exc).__name__}: {exc}"
    sglang = sys.modules.get("sglang")
    if sglang is None:
        info["sglang_error"] = "this process did not import sglang"
    else:
        info["sglang_path"] = getattr(sglang, "__file__", None)
        info["sglang"] = getattr(sglang, "__version__", None)
        if info["sglang"] is None:
            try:
                from importlib.metadata import version  # only here: the file imports the rest

                info["sglang"] = version("sglang")
            except ImportError:  # PackageNotFoundError: a source tree, no package metadata
                pass
    overlay = sys.modules.get("sglang_overlay")
    try:
        if overlay is None:
            import sglang_overlay as overlay  # its package: constants and a lazy status()
        info["overlay"] = overlay.status()
    except ImportError:
        info["overlay"] = None
    except Exception as exc:
        info["overlay_error"] = f"{type(exc).__name__}: {exc}"
    return info


def run_as_main(path: str) -> None:
    """Run ``path`` as ``python FILE`` does: compiled under its absolute name, in a fresh
    ``__main__`` module that stays in ``sys.modules`` after the body ends."""
    file = os.path.abspath(path)
    try:
        with open(file, "rb") as source:
            text = source.read()
    except OSError as exc:
        print(
            f"{sys.executable}: can't open file {file!r}: [Errno {exc.errno}] {exc.strerror}",
            file=sys.stderr,
        )
        sys.exit(2)
    code = compile(text, file, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=file,
        __cached__=None,
        __builtins__=builtins,
        __loader__=SourceFileLoader("__main__", file),
    )
    sys.modules["__main__"] = main
    exiting = False
    try:
        exec(code, main.__dict__)
    except SystemExit:
        exiting = True  # python FILE exits from inside its run, __file__ still set
        raise
    finally:
        if not exiting:  # once the body has returned or raised, python FILE drops these
            main.__dict__.pop("__file__", None)
            main.__dict__.pop("__cached__", None)


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[0] != "--results-fd" or argv[2] != "--environment-fd":
        print(
            "usage: file_process.py --results-fd N --environment-fd M FILE [ARGS...]",
            file=sys.stderr,
        )
        sys.exit(2)
    channel = Channel(int(argv[1]))
    record_fd, path, args = int(argv[3]), argv[4], argv[5:]
    attempts = Attempts()
    hook_unittest(channel, attempts)
    if "pytest" in sys.modules:  # a site hook imported it already
        hook_pytest(sys.modules["pytest"], channel, attempts)
    else:
        hook = lambda m: hook_pytest(m, channel, attempts)  # noqa: E731
        sys.meta_path.insert(0, AfterImport("pytest", hook))
    sys.argv = [path, *args]
    if not getattr(sys.flags, "safe_path", False):  # ``python -P`` adds no directory
        sys.path[0] = os.path.dirname(os.path.realpath(path))  # as ``python FILE`` sets it
    started = os.getpid()
    try:
        run_as_main(path)  # SystemExit and any exception end the process as they would there
    finally:
        # A child the file forked that ends through SystemExit comes here too: the record is
        # the starting process's alone. Nothing raised here may replace the file's outcome.
        if os.getpid() == started:
            try:
                # How many results the channel wrote: more on it are not the runner's.
                facts = {**describe_process(), "results": channel.sent}
                with open(record_fd, "wb") as record:
                    record.write(json.dumps(facts, default=str).encode())
            except BaseException as exc:
                print(f"file_process: no environment record: {exc!r}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
