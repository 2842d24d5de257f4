"""``ci run`` against hostile registered files and trees (the test process is PR code): every way
a test method runs has its attempts counted, a retry upstream's CI would hide is flaky, a
looping link is not followed, and results its own report would refuse fail the run.
"""

import json
import os
import subprocess
import sys

import pytest
from ci_samples import FILE
from conftest import NO_RETRY_DELAY, REPO, clean_env

from ci.runner import collect, launch, sides

# Each test fails its first call and passes the second; the file calls its methods every way
# the issue found: an asyncio CustomTestCase (upstream's pattern), sync and async methods; a
# class's own _callTestMethod; a _callTestMethod put back on TestCase itself; and one class
# whose own run() calls the method around every hook.
EVERY_WAY = """
import unittest
from collections import Counter

from sglang.test.test_utils import CustomTestCase

CALLS = Counter()


def second_call_passes(test):
    CALLS[test.id()] += 1
    test.assertGreater(CALLS[test.id()], 1, "the first call fails")


class AsyncCustom(CustomTestCase, unittest.IsolatedAsyncioTestCase):
    async def test_async(self):
        second_call_passes(self)

    def test_sync(self):
        second_call_passes(self)


class OwnCall(unittest.TestCase):
    def _callTestMethod(self, method):
        try:
            method()
        except AssertionError:
            method()

    def test_own(self):
        second_call_passes(self)


def call_twice(self, method):
    try:
        method()
    except AssertionError:
        getattr(self, self._testMethodName)()


class Restored(unittest.TestCase):
    def test_restored(self):
        second_call_passes(self)


class AroundEveryHook(unittest.TestCase):
    def run(self, result=None):
        result.startTest(self)
        method = getattr(type(self), self._testMethodName)
        try:
            method(self)
        except AssertionError:
            method(self)
        result.addSuccess(self)
        result.stopTest(self)

    def test_around(self):
        second_call_passes(self)


class Plain(unittest.TestCase):
    def test_once(self):
        pass

    @unittest.expectedFailure
    def test_expected(self):
        self.fail("known")

    @staticmethod
    def test_static():
        raise AssertionError("a method without self fails as itself")


if __name__ == "__main__":
    unittest.TestCase._callTestMethod = call_twice
    unittest.main()
"""


PYTEST_WAY = """
import sys
import unittest

import pytest
from sglang.test.test_utils import CustomTestCase

CALLS = []


class AsyncCustom(CustomTestCase, unittest.IsolatedAsyncioTestCase):
    async def test_async(self):
        CALLS.append(1)
        self.assertGreater(len(CALLS), 1)


def test_function():
    pass


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
"""


@pytest.fixture(scope="module")
def custom_runs(tmp_path_factory):
    """Both files, each in a child of ONE process that imported sglang's test utilities (as
    `ci run` runs them by default), in sglang's CI mode and without its retry back-off:
    {file: (its run, its result lines by test)}. Forking both from one import, instead of two
    fresh interpreters, saves one import of sglang (about 6 CPU-s)."""

    folder = tmp_path_factory.mktemp("custom")
    (folder / "logs").mkdir()
    files = {"test_every_way.py": EVERY_WAY, "test_pytest_way.py": PYTEST_WAY}
    for name, source in files.items():
        (folder / name).write_text(source)
    base = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    env = sides.environment(sides.SideSetup("change"), base=base)
    assert env["SGLANG_IS_IN_CI"] == "true"
    # Where the preload is refused (test_ci_preload's subject) each file runs fresh instead.
    runs, _ = launch.run_all(list(files), {"change": env}, str(folder), 300, 2, lambda _: None,
                             str(folder / "logs"), ("sglang.test.test_utils",))  # fmt: skip
    found = {}
    for run in runs:
        lines = [json.loads(line) for line in run.channel.splitlines()]
        found[run.path] = (run, {line["test"]: line for line in lines})
    return found


def test_every_way_a_method_runs_has_its_attempts_counted(custom_runs):
    run, lines = custom_runs["test_every_way.py"]
    assert run.returncode == 1, run.output[-3000:]  # test_static fails
    for test in ("AsyncCustom.test_async", "AsyncCustom.test_sync", "OwnCall.test_own",
                 "Restored.test_restored"):  # fmt: skip
        line = lines[test]
        assert line["outcome"] == "pass" and line["attempts"] == ["fail", "pass"], line
        assert line["detail"].startswith("attempt 1 of 2 failed, the last passed"), line
        assert "the first call fails" in line["detail"]
    around = lines["AroundEveryHook.test_around"]
    assert around["outcome"] == "pass" and around.get("unobserved") is True, around
    assert lines["Plain.test_once"]["attempts"] == ["pass"]
    assert "unobserved" not in lines["Plain.test_once"]
    # An expected failure fails every call (the restored method calls it twice): no retry
    # passed it.
    assert lines["Plain.test_expected"]["attempts"] == ["fail", "fail"]
    static = lines["Plain.test_static"]
    assert static["outcome"] == "fail" and static["attempts"] == ["fail", "fail"], static
    assert "a method without self fails as itself" in static["detail"]
    assert not lines["Plain.test_expected"]["detail"].startswith("attempt")


def test_a_unittest_case_that_pytest_runs_has_its_attempts_counted(custom_runs):
    run, lines = custom_runs["test_pytest_way.py"]
    assert run.returncode == 0, run.output[-3000:]
    assert lines["AsyncCustom.test_async"]["attempts"] == ["fail", "pass"], lines
    # A plain function has no retry to count: a pass, not an unproven one.
    assert lines["test_function"]["outcome"] == "pass"
    assert "unobserved" not in lines["test_function"]


ASYNC_FLAKY = """
import os
import tempfile
import unittest

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


class TestAsyncFlaky(CustomTestCase, unittest.IsolatedAsyncioTestCase):
    async def test_passes_on_its_retry(self):
        self.calls = getattr(type(self), "calls", 0) + 1
        type(self).calls = self.calls
        self.assertGreater(self.calls, 1, "the first attempt fails")


if __name__ == "__main__":
    unittest.main()
"""


def test_an_async_custom_test_case_that_passes_on_its_retry_is_flaky_in_ci_run(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "test_async_flaky.py").write_text(ASYNC_FLAKY)
    (tmp_path / "none.txt").write_text("")
    argv = [sys.executable, "-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend", "cpu",
            "--root", str(root), "--tests", "test_async_flaky.py",
            "--regressions", str(tmp_path / "none.txt"), "--change-env", "SIDE=change"]  # fmt: skip
    env = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (case,) = results["cases"]
    assert case["kind"] == "flaky", case
    assert case["modes"]["change"]["attempts"] == ["fail", "pass"]
    assert case["modes"]["unmodified"]["attempts"] == ["fail", "pass"]
    assert "1 flaky with" in proc.stdout, proc.stdout


PASSES = """
import unittest

import sglang  # each side's


def register_cpu_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time=5, suite="base-a-test-cpu")


class T(unittest.TestCase):
    def test_passes(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""


def test_a_run_through_a_looping_link_and_a_version_the_report_refuses(tmp_path):
    """A folder link to its own folder is named and not followed (each file runs once per
    side); a side whose sglang says a version the report would refuse (over 100 characters)
    fails the run in one line."""
    root, out, tree = tmp_path / "root", tmp_path / "out", tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)
    version = "0.5.23+" + "x" * 120
    (tree / "python" / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_logs.py").write_text(PASSES)
    os.symlink(".", root / "tests" / "loop")
    (tmp_path / "none.txt").write_text("")
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", "--root",
            str(root), "--tests", "tests", "--regressions", str(tmp_path / "none.txt"),
            "--change-src", str(tree)]  # fmt: skip
    proc = subprocess.run(
        argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "Traceback" not in said, said
    assert "tests/loop: a link to a folder: not followed" in proc.stderr, said
    assert proc.stderr.count("tests/test_logs.py: exit 0") == 2, said  # once per side
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "ci report would refuse these results" in errors[0], said
    assert "sides.change.sglang: 127 characters; at most 100" in errors[0], errors
    data = json.loads((out / "results.json").read_text())  # kept: nothing lost
    assert {"file": "tests/loop", "why": "a link to a folder: not followed (its tests are not "
            "run through it)"} in data["selection"]["not_run"]  # fmt: skip
    assert [c["kind"] for c in data["cases"]] == ["preservation"]


def test_the_dirty_tree_message_names_the_whole_path(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "abc.py").write_text("x = 1\n")
    git("add", "abc.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "abc.py").write_text("x = 2\n")  # " M abc.py": modified, not staged
    with pytest.raises(sides.RequestError) as refused:
        sides.read_change(str(tmp_path), "HEAD", "HEAD")
    assert "uncommitted changes (abc.py...)" in str(refused.value), refused.value


def test_run_records_each_cases_def_line_for_its_annotation(tmp_path):
    lines = collect.Tree(".", (FILE,)).test_lines(FILE)
    assert lines and all(isinstance(n, int) and n > 1 for n in lines.values())
    with open(FILE) as handle:
        source = handle.read().splitlines()
    for key, line in lines.items():
        assert source[line - 1].lstrip().startswith(("def " + key.split(".")[-1], "async def "))
    assert collect.line_of(lines, "TestX.test_y[3]") is None
    assert collect.line_of({"test_y": 7}, "test_y[3]") == 7
