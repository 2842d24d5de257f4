"""The process a test file runs in under ``ci run`` (ci/runner/file_process.py): it runs the file
exactly as ``python FILE ARGS`` would, reports each finished test from outside the file, and
writes a record of what the process ran with; and file selection never imports sglang.

Running as ``python FILE`` is checked against ``python FILE`` itself (``__file__``,
``sys.path[0]`` through a symlink, torch imported only by the file, ``__main__`` for its threads
and atexit handlers, a forked child ending through SystemExit). The results come from hooks on
unittest's result class and a plugin handed to ``pytest.main``, on files written the way
upstream writes them, none of which knows about the runner.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from ci_samples import file_run
from conftest import REPO, clean_env

from ci.runner import environment, launch


def run_file_process(cwd, path, *args, **env):
    """``ci/runner/file_process.py`` on ``path`` in ``cwd``: the finished process, its result
    lines and its record."""
    results_read, results_write = os.pipe()
    record_read, record_write = os.pipe()
    command = [sys.executable, launch.FILE_PROCESS, "--results-fd", str(results_write)]
    command += ["--environment-fd", str(record_write), path, *args]
    try:
        proc = subprocess.Popen(
            command,
            env=clean_env(**env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(results_write, record_write),
        )
    finally:
        os.close(results_write)
        os.close(record_write)
    with os.fdopen(results_read) as results, os.fdopen(record_read) as record:
        out, err = proc.communicate(timeout=120)
        lines = [json.loads(line) for line in results.read().splitlines()]
        text = record.read()
    return subprocess.CompletedProcess(command, proc.returncode, out, err), lines, text


def outcomes(lines) -> dict:
    return {line["test"]: line["outcome"] for line in lines}


def run_source(tmp_path, source, name="test_file.py", *args):
    (tmp_path / name).write_text(source)
    return run_file_process(tmp_path, name, "-v", *args)


UNITTEST = """
import unittest


class TestKinds(unittest.TestCase):
    def test_passes(self):
        pass

    def test_fails(self):
        self.assertEqual(1, 2, "one is not two")

    def test_errors(self):
        raise KeyError("boom")

    @unittest.skip("not here")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.fail("known")

    @unittest.expectedFailure
    def test_unexpected_success(self):
        pass

    def test_sub_tests(self):
        for value in (1, 2):
            with self.subTest(value=value):
                self.assertEqual(value, 1)


class TestSetUpClassFails(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("no GPU for the fixture")

    def test_never_runs(self):
        pass


class Retrying(unittest.TestCase):
    # CustomTestCase's shape: the test method runs inside a retry that re-raises as Exception.
    def _callTestMethod(self, method):
        try:
            method()
        except AssertionError as exc:
            raise Exception("retry() exceed maximum number of retries.") from exc


class TestRetried(Retrying):
    def test_peak(self):
        self.assertLess(160.0, 100)


if __name__ == "__main__":
    unittest.main()
"""


def test_unittest_results_are_reported_from_outside_the_file(tmp_path):
    proc, lines, _ = run_source(tmp_path, UNITTEST)
    assert proc.returncode == 1, proc.stderr
    assert outcomes(lines) == {
        "TestKinds.test_errors": "error",
        "TestKinds.test_expected_failure": "pass",
        "TestKinds.test_fails": "fail",
        "TestKinds.test_passes": "pass",
        "TestKinds.test_skipped": "skip",
        "TestKinds.test_sub_tests": "fail",
        "TestKinds.test_unexpected_success": "fail",
        "TestSetUpClassFails.setUpClass": "error",
        "TestRetried.test_peak": "error",
    }
    details = {line["test"]: line["detail"] for line in lines}
    assert "one is not two" in details["TestKinds.test_fails"]
    assert "(value=2)" in details["TestKinds.test_sub_tests"]
    assert "no GPU for the fixture" in details["TestSetUpClassFails.setUpClass"]
    assert "160.0 not less than 100" in details["TestRetried.test_peak"]
    assert details["TestKinds.test_skipped"] == "not here"
    assert all(line["duration_s"] is not None for line in lines if "setUp" not in line["test"])
    assert "Ran 8 tests" in proc.stderr  # unittest's own report is untouched


PYTEST_FILE = """
import sys

import pytest


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_passes():
    pass


@pytest.mark.parametrize("value", [1, 2])
def test_param(value):
    assert value == 1


def test_fixture_error(broken):
    pass


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_expected():
    assert False


class TestGrouped:
    def test_method(self):
        pass


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
"""


def test_pytest_results_are_reported_through_a_plugin_the_file_never_names(tmp_path):
    proc, lines, _ = run_source(tmp_path, PYTEST_FILE)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert outcomes(lines) == {
        "test_passes": "pass",
        "test_param[1]": "pass",
        "test_param[2]": "fail",
        "test_fixture_error": "error",
        "test_skipped": "skip",
        "test_expected": "skip",
        "TestGrouped.test_method": "pass",
    }
    details = {line["test"]: line["detail"] for line in lines}
    assert "fixture broke" in details["test_fixture_error"]
    assert details["test_skipped"] == "not here"


def test_a_pytest_file_that_does_not_import_is_one_collection_error(tmp_path):
    source = "import sys\nimport pytest\nimport no_such_module\n"
    source += "if __name__ == '__main__':\n    sys.exit(pytest.main([__file__]))\n"
    # python FILE fails at its own import first: nothing reaches pytest.
    proc, lines, _ = run_source(tmp_path, source)
    assert proc.returncode == 1 and lines == [] and "no_such_module" in proc.stderr


def test_a_file_that_exits_before_its_tests_or_does_not_compile_reports_nothing(tmp_path):
    early = "import sys, unittest\nsys.exit(0)\n"
    proc, lines, text = run_source(tmp_path, early)
    assert (proc.returncode, lines) == (0, []) and json.loads(text)["python"]
    proc, lines, text = run_source(tmp_path, "def broken(:\n", "test_syntax.py")
    assert proc.returncode == 1 and lines == [] and "SyntaxError" in proc.stderr


def test_results_of_a_child_the_file_forks_are_not_reported_twice(tmp_path):
    source = UNITTEST.replace(
        "    def test_passes(self):\n        pass",
        "    def test_passes(self):\n        import os\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            unittest.main(argv=['x', 'TestKinds.test_fails'], exit=False)\n"
        "            os._exit(0)\n"
        "        os.waitpid(pid, 0)",
    )
    _, lines, _ = run_source(tmp_path, source)
    tests = [line["test"] for line in lines]
    assert tests.count("TestKinds.test_fails") == 1 and len(tests) == len(set(tests))


def test_bad_usage_is_exit_code_2():
    proc = subprocess.run(
        [sys.executable, launch.FILE_PROCESS, "prog.py"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_a_record_keeps_known_keys_and_plain_values_only():
    hostile = {
        "torch": "2.13.0" + "x" * 10_000,
        "gpu": {"nested": ["<script>"]},
        "overlay": [{"patch": "0001", "state": "applied", "extra": "dropped"}, "junk"] * 20,
        "injected": "@everyone",
    }
    record = environment.process_record(json.dumps(hostile))
    assert set(record) == {"torch", "gpu", "overlay"}
    assert len(record["torch"]) == environment.FIELD_CHARS
    assert record["gpu"] == str({"nested": ["<script>"]})
    assert len(record["overlay"]) == 5  # the first ten items, dicts only
    assert record["overlay"][0] == {
        "patch": "0001",
        "state": "applied",
        "target": None,
        "sglang_version": None,
        "reason": None,
    }
    for junk in ("", "not json", "[1, 2]", "null", '"text"', "{" * 100_000):
        assert environment.process_record(junk) is None


def test_each_mode_is_described_by_its_own_test_process():
    change = replace(file_run("change", []), environment=json.dumps({"sglang": "0.5.23"}))
    silent = replace(file_run("unmodified", []), environment="")
    records = environment.records_by_mode([silent, change], ["unmodified", "change"])
    assert records["change"] == {"sglang": "0.5.23"}
    assert "error" in records["unmodified"]


def test_selecting_files_imports_neither_sglang_nor_torch():
    program = (
        "import sys\n"
        "from ci.runner import collect\n"
        "chosen = [s.path for s in collect.select('.', 'cuda')]\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('sglang', 'torch'))\n"
        "print(chosen, loaded)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, env=clean_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "['test/registered/kernels/ops/attention/dsv4/test_dsv4_q8kv8_qpad_peak.py', "
        "'test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py', "
        "'test/registered/kernels/ops/attention/test_dsa_q8kv8_born_q_peak.py', "
        "'test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py', "
        "'test/registered/kernels/ops/speculative/test_dflash_draft_probs_peak.py', "
        "'test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py'] []"
    )


# --- what ``python FILE`` gives, compared with the real thing -------------------------------


def both_ways(tmp_path, source, path, *args, **env):
    """``python PATH ARGS`` and the file process on PATH (relative to ``tmp_path``): each
    one's (exit code, stdout, stderr), and the file process's record."""
    file = tmp_path / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(source)
    plain = subprocess.run(
        [sys.executable, path, *args],
        env=clean_env(**env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    through, _, text = run_file_process(tmp_path, path, *args, **env)
    return plain, through, text


IDENTITY = """
import json, sys
print(json.dumps({
    "file": __file__, "argv": sys.argv, "path0": sys.path[0], "name": __name__,
    "spec": repr(__spec__), "cached": __cached__, "loader": type(__loader__).__name__,
    "builtins": getattr(__builtins__, "__name__", None),
    "torch_already_imported": "torch" in sys.modules,
}))
"""


def test_a_relative_path_through_a_symlink_gives_the_file_what_python_file_gives(tmp_path):
    # Python 3.9+: __file__ absolute, argv[0] as typed, sys.path[0] the real directory.
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to("real")
    plain, through, _ = both_ways(tmp_path, IDENTITY, "linked/prog.py", "-v")
    assert plain.returncode == through.returncode == 0, through.stderr
    assert json.loads(through.stdout) == json.loads(plain.stdout)


def test_torch_is_imported_by_the_file_not_before_it(tmp_path):
    # Settings a file makes before ``import torch`` (OMP_NUM_THREADS, TORCH_LOGS) must be
    # there when torch starts.
    (tmp_path / "prog.py").write_text(IDENTITY + "import torch\n")
    through, _, text = run_file_process(tmp_path, "prog.py")
    assert through.returncode == 0, through.stderr
    assert json.loads(through.stdout)["torch_already_imported"] is False
    assert json.loads(text)["torch"]


def test_a_file_that_never_imports_torch_or_sglang_gets_neither_at_exit(tmp_path):
    plain, through, text = both_ways(tmp_path, "import sys\n", "prog.py")
    assert through.returncode == 0, through.stderr
    record = json.loads(text)
    assert record["torch_error"] == "torch was not imported"
    assert record["sglang_error"] == "this process did not import sglang"


LATE = """
import atexit, pickle, sys, threading, time

class Point:
    def __init__(self, x):
        self.x = x

def later(where):
    main = vars(sys.modules["__main__"])
    print(where, pickle.loads(pickle.dumps(Point(3))).x, "__file__" in main, flush=True)

atexit.register(later, "atexit")
threading.Thread(target=lambda: (time.sleep(0.2), later("thread"))).start()
print("body done", flush=True)
"""


def test_the_file_stays_main_after_its_body_ends_for_its_threads_and_atexit(tmp_path):
    plain, through, _ = both_ways(tmp_path, LATE, "prog.py")
    # python FILE drops __file__ once a body that did not call sys.exit has ended
    assert plain.stdout == "body done\nthread 3 False\natexit 3 False\n"
    assert (through.returncode, through.stdout) == (0, plain.stdout), through.stderr


FORKS = """
import os, sys
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the child ends as a script does, through SystemExit
os.waitpid(pid, 0)
sys.exit(4)
"""


def test_a_forked_child_that_exits_through_systemexit_leaves_the_record_to_its_parent(tmp_path):
    plain, through, text = both_ways(tmp_path, FORKS, "prog.py")
    assert plain.returncode == through.returncode == 4, through.stderr
    assert environment.process_record(text) is not None  # one record, not two run together


BREAKS_THE_RECORD = """
import sys
import sglang_overlay

def status():
    raise RuntimeError("no status today")

sglang_overlay.status = status
sys.exit(3)
"""


def test_a_part_of_the_record_that_fails_says_why_and_the_rest_is_kept(tmp_path):
    _, through, text = both_ways(tmp_path, BREAKS_THE_RECORD, "prog.py")
    assert through.returncode == 3, through.stderr
    record = json.loads(text)
    assert record["overlay_error"] == "RuntimeError: no status today"
    assert record["python"] and record["torch_error"]


RAISES_PAST_EXCEPTION = """
import sys

class Torch:
    @property
    def __version__(self):
        raise KeyboardInterrupt  # not an Exception: it passes every `except Exception`

sys.modules["torch"] = Torch()
sys.exit(5)
"""


def test_a_record_that_cannot_be_made_never_changes_the_files_exit_code(tmp_path):
    _, through, text = both_ways(tmp_path, RAISES_PAST_EXCEPTION, "prog.py")
    assert through.returncode == 5, through.stderr
    assert "no environment record" in through.stderr


HOLDS_A_CUDA_CONTEXT = """
import sys
import types
import unittest

# A stand-in torch whose process holds a CUDA context, as importing sglang makes one on a GPU
# host even when the test measures CPU memory.
cuda = types.SimpleNamespace(
    is_initialized=lambda: True,
    reset_peak_memory_stats=lambda: None,
    max_memory_allocated=lambda: 5 << 20,
)
sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
PEAKS_MIB = {}


class TestPeaks(unittest.TestCase):
    def test_measures_itself(self):
        PEAKS_MIB[self._testMethodName] = 7.5

    def test_measures_nothing(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""


def test_a_cpu_run_reports_the_peak_the_file_measured_never_a_cuda_context_it_holds(tmp_path):
    (tmp_path / "test_peaks.py").write_text(HOLDS_A_CUDA_CONTEXT)
    peaks = {}
    for backend in ("cuda", "cpu"):
        proc, lines, _ = run_file_process(
            tmp_path, "test_peaks.py", SGLANG_OVERLAY_CI_BACKEND=backend
        )
        assert proc.returncode == 0, proc.stderr
        peaks[backend] = {line["test"]: line.get("peak_mib") for line in lines}
    assert peaks["cuda"] == {
        "TestPeaks.test_measures_itself": 5.0,
        "TestPeaks.test_measures_nothing": 5.0,
    }
    assert peaks["cpu"] == {
        "TestPeaks.test_measures_itself": 7.5,
        "TestPeaks.test_measures_nothing": None,
    }


def test_a_cuda_error_costs_the_peak_and_is_said_and_anything_else_surfaces(monkeypatch, capsys):
    import types

    from ci.runner import file_process

    def cuda(fails_with):
        def raise_it():
            raise fails_with

        return types.SimpleNamespace(is_initialized=lambda: True, max_memory_allocated=raise_it)

    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda(error)))
    assert file_process._cuda("max_memory_allocated") is None
    assert "illegal memory access" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda(TypeError("odd"))))
    with pytest.raises(TypeError):
        file_process._cuda("max_memory_allocated")
