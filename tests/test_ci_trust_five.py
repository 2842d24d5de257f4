"""Trust, part four (issue 34), the rest: every way a test method can run has its attempts
counted (a pass the runner could not count is `unproven`, never green), a file that reports
more results than the runner wrote is broken, hostile trees and names end in one line, and
`ci run` refuses results its own report would. Each test here reproduced its break before the
fix (the commit that added it says so)."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import ci_samples
from conftest import NO_RETRY_DELAY, REPO, clean_env
from test_ci_file_process import run_file_process

from ci.evidence.model import Outcome

# --- 2: a retry the bot cannot see --------------------------------------------------------------

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


def _ci_process(tmp_path, source, name):
    (tmp_path / name).write_text(source)
    proc, lines, record = run_file_process(
        tmp_path, name, "-v", PYTHONPATH=str(NO_RETRY_DELAY), SGLANG_IS_IN_CI="true"
    )
    return proc, {line["test"]: line for line in lines}, record


def test_every_way_a_method_runs_has_its_attempts_counted(tmp_path):
    proc, lines, _ = _ci_process(tmp_path, EVERY_WAY, "test_every_way.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
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


def test_a_unittest_case_that_pytest_runs_has_its_attempts_counted(tmp_path):
    proc, lines, _ = _ci_process(tmp_path, PYTEST_WAY, "test_pytest_way.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert lines["AsyncCustom.test_async"]["attempts"] == ["fail", "pass"], lines
    # A plain function has no retry to count: a pass, not an unproven one.
    assert lines["test_function"]["outcome"] == "pass"
    assert "unobserved" not in lines["test_function"]


def _with(run, test, **fields):
    lines = []
    for text in run.channel.splitlines():
        line = json.loads(text)
        if line["test"].endswith(test):
            line.update(fields)
        lines.append(json.dumps(line))
    return replace(run, channel="\n".join(lines) + "\n")


def test_a_pass_whose_attempts_went_unseen_is_unproven_on_either_side_never_green():
    unmodified, change = ci_samples.workspace_runs()
    for runs, side in (
        ([unmodified, _with(change, ci_samples.REUSE, unobserved=True)], "change"),
        ([_with(unmodified, ci_samples.REUSE, unobserved=True), change], "unmodified"),
    ):
        m = ci_samples.model(runs)
        (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
        assert reuse.kind == "unproven" and reuse.modes[side].outcome == Outcome.PASS, side
        assert m.verdict == "failed", (side, m.verdict)
        assert any(r.startswith("1 not proven") for r in m.reasons), m.reasons
    # An expected failure's attempts end in the failure: a pass, not a retried one.
    expected = _with(change, ci_samples.REUSE, attempts=["fail"])
    m = ci_samples.model([unmodified, expected])
    (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
    assert reuse.kind == "preservation", reuse.kind


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
            "--regressions", str(tmp_path / "none.txt")]  # fmt: skip
    env = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (case,) = results["cases"]
    assert case["kind"] == "flaky", case
    assert case["modes"]["change"]["attempts"] == ["fail", "pass"]
    assert case["modes"]["unmodified"]["attempts"] == ["fail", "pass"]
    assert "1 flaky with" in proc.stdout, proc.stdout
    assert os.path.isfile(tmp_path / "out" / "report.md")


# --- 4: a file that reports more results than the runner wrote is broken -------------------------

WRITES_ITS_OWN = """
import json, os, unittest


def channel():
    args = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    return int(args[args.index(b"--results-fd") + 1])


def forge(test):
    line = {"test": test, "outcome": "pass", "duration_s": 0.1, "detail": ""}
    os.write(channel(), (json.dumps(line) + "\\n").encode())


class T(unittest.TestCase):
    def test_fails(self):
        self.fail("the change breaks this")

    def test_passes(self):
        pass


if __name__ == "__main__":
    if os.path.basename(__file__) == "test_exits.py":
        forge("T.test_fails")  # a pass for the failing test, then no run at all
        os._exit(0)
    forge("T.test_ghost")  # one more result than the file has tests
    unittest.main()
"""


def test_results_the_runner_did_not_write_make_the_file_broken(tmp_path):
    from ci.evidence import judge
    from ci.runner import launch, modes

    for name in ("test_exits.py", "test_extra.py"):
        (tmp_path / name).write_text(WRITES_ITS_OWN)
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=clean_env())
    runs = launch.run_all(["test_exits.py", "test_extra.py"], {"change": env}, str(tmp_path), 120,
                          2, lambda _: None, (), {})  # fmt: skip
    m = judge.build(runs, "cpu", {"change": ci_samples.sides()["change"]}, {})
    kinds = {c.key: c.kind for c in m.cases}
    assert kinds["test_exits.py::T.test_fails"] == "broken", kinds
    assert kinds["test_exits.py::(whole file)"] == "broken", kinds
    assert kinds["test_extra.py::(whole file)"] == "broken", kinds
    whole = {c.file: c.modes["change"].detail for c in m.cases if c.test == "(whole file)"}
    assert "ended without the runner's record" in whole["test_exits.py"], whole
    assert "3 results on its channel; the runner wrote 2" in whole["test_extra.py"], whole
    assert m.verdict == "failed"
