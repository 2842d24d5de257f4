"""Fresh processes of the project venv that several test modules share, started at once."""

import json
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import standin
from conftest import WORKSPACE_MODULE, clean_env, group_of

WORKERS = max(2, min(4, os.cpu_count() or 2))
JOB_TIMEOUT_S = 300  # one process; a bound against hangs, never a measurement

# the shared process's observations in order, in a user's environment; hooks come last
ORDER = ("start_modules", "first_import", "second_activation", "torch_compile", "hook_AROUND",
         "reader_after_the_real_import")  # fmt: skip
# each observation returns JSON or raises; the document goes to the file argv[1] names
PRELUDE = """\
import json, sys, traceback
_observed, _document = {}, sys.argv.pop(1)
def _observe(name, body):
    try:
        _observed[name] = {"value": body()}
    except BaseException:
        _observed[name] = {"error": traceback.format_exc()}
"""
_observations: "dict[str, str]" = {}
_jobs: dict = {}


def observe(process: str, name: str, body: str) -> str:
    """Register ``body`` (returns JSON) as observation ``name`` of the shared ``process``."""
    assert process == "default_process" and name in ORDER, f"{name} has no place in {ORDER}"
    _observations[name] = body.replace("{WORKSPACE_MODULE}", WORKSPACE_MODULE)
    return name


def job(name: str):
    """Register ``fn(tmp_dir) -> result`` as job ``name``; the fixture ``name`` returns it."""

    def register(fn):
        _jobs[name] = fn
        return fn

    return register


def fixture(name: str):
    """The module-scoped fixture ``name``: the result of job ``name``."""

    @pytest.fixture(scope="module", name=name)
    def _result(request):
        return POOL.result(name, request)

    return _result


class Observations:
    """What the shared process observed, by observation name."""

    def __init__(self, observed: dict, stderr: str):
        self.observed, self.stderr = observed, stderr

    def value(self, name: str):
        entry = self.observed.get(name)
        assert entry is not None, f"{name} was not observed; stderr: {self.stderr[-3000:]}"
        assert "error" not in entry, f"{name} raised in the process:\n{entry['error']}"
        return entry["value"]


@job("default_process")
def _shared(directory) -> Observations:
    runtime_dir, document = directory / "records", directory / "observations.json"
    runtime_dir.mkdir(mode=0o700)
    code = PRELUDE + "".join(
        f"def _body():\n{textwrap.indent(textwrap.dedent(body).strip(), '    ')}\n"
        f"_observe({name!r}, _body)\n"
        for name in ORDER
        if (body := _observations.get(name)) is not None
    )
    code += 'with open(_document, "w") as _file:\n    json.dump(_observed, _file)\n'
    proc = POOL.run(
        [sys.executable, "-c", code, str(document)],
        env=clean_env(SGLANG_OVERLAY_RUNTIME_DIR=str(runtime_dir)),
        cwd="/",
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and document.exists(), proc.stderr[-3000:]
    return Observations(json.loads(document.read_text()), proc.stderr)


class Pool:
    """The threads that start and wait for the jobs, WORKERS at a time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._executor = None
        self._futures: dict = {}
        self._live: set = set()
        self._closed = False

    def result(self, name: str, request):
        self._start(request)
        future, position = self._futures[name]
        # a backstop behind each job's own bound: WORKERS jobs at a time
        return future.result(timeout=JOB_TIMEOUT_S * (position // WORKERS + 2))

    def _start(self, request):
        """Submit every not yet submitted job that a selected test uses, in test order."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="overlay-run")
                request.config.add_cleanup(self.close)
            tmp = request.getfixturevalue("tmp_path_factory")
            for item in _items_here(request):
                for name in item.fixturenames:
                    if name in _jobs and name not in self._futures:
                        future = self._executor.submit(_jobs[name], tmp.mktemp(name))
                        self._futures[name] = (future, len(self._futures))

    def close(self):
        with self._lock:
            self._closed = True
            for proc in list(self._live):
                proc.kill()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def run(self, argv, timeout=JOB_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run`` whose process the pool kills if the session ends first."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the test session is over")
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
            )
            self._live.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        finally:
            with self._lock:
                self._live.discard(proc)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


POOL = Pool()


def pool_names() -> set:
    """The names of every job, as a test names them among its fixtures."""
    return set(_jobs)


def _items_here(request):
    """The tests whose jobs this pytest process starts (one xdist group's, or all selected)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return request.session.items
    group = group_of(request.node.path.name)
    return [item for item in request.session.items if group_of(item.path.name) == group]


def standin_root(tmp_path_factory):
    """The stand-in sglang and torch (``standin.py``)."""
    return standin.write(tmp_path_factory.mktemp("standin"))
