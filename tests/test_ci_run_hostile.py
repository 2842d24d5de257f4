"""``ci run`` against hostile registered files and trees (the test process is PR code): every way
a test method runs has its attempts counted, a retry upstream's CI would hide is flaky, hostile
trees and file names end in one line, nothing printed starts a workflow command, and results
its own report would refuse fail the run.
"""

import json
import os
import subprocess
import sys

import pytest
from ci_samples import FILE
from conftest import NO_RETRY_DELAY, REPO, clean_env

from ci.__main__ import main
from ci.runner import collect, launch, modes

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
    files = {"test_every_way.py": EVERY_WAY, "test_pytest_way.py": PYTEST_WAY}
    for name, source in files.items():
        (folder / name).write_text(source)
    base = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=base)
    assert env["SGLANG_IS_IN_CI"] == "true"
    # Where the preload is refused (test_ci_preload's subject) each file runs fresh instead.
    runs = launch.run_all(list(files), {"change": env}, str(folder), 300, 2, lambda _: None,
                          ("sglang.test.test_utils",))  # fmt: skip
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


REGISTERED = """import unittest
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


class T(unittest.TestCase):
    def test_x(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""


def _checkout(tmp_path, head: dict) -> str:
    """An sglang-layout checkout: ``main`` with one registered test, ``head`` adding ``head``
    (path -> text, or ("link", target))."""
    repo = tmp_path / "sglang"

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    (repo / "python/sglang").mkdir(parents=True)
    (repo / "test/registered").mkdir(parents=True)
    (repo / "python/sglang/__init__.py").write_text('__version__ = "0.5.23"\n')
    (repo / "test/registered/test_base.py").write_text(REGISTERED)
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    git("checkout", "-qb", "head")
    for path, what in head.items():
        target = repo / os.fsdecode(path)
        if isinstance(what, tuple):
            os.symlink(what[1], target)
        else:
            target.write_text(what)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "head")
    git("checkout", "-q", "main")
    return str(repo)


def _refused(capsys, *args) -> str:

    code = main(["run", "--backend", "cpu", *map(str, args)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    return err


def test_a_head_whose_tree_links_out_is_one_line_and_exit_2(tmp_path, capsys):
    for name, target, said in (
        ("absolute", "/etc", "a link to the absolute path '/etc'"),
        ("climbs", "../../..", "a link out of the tree ('../../..')"),
    ):
        repo = _checkout(tmp_path / name, {"test/registered/evil": ("link", target)})
        out = tmp_path / name / "out"
        err = _refused(capsys, "--out", out, "--root", repo, "--git-base", "main",
                       "--git-head", "head")  # fmt: skip
        assert err.startswith("error: commit ") and said in err, err
        assert "'test/registered/evil' is" in err, err
        assert not (out / "sides").exists()


def test_member_problem_judges_names_and_links_as_git_lists_them():
    from ci.runner.git_sides import member_problem

    assert member_problem("test/registered/a.py") is None
    assert member_problem("test/registered/l", "../unit/x.py") is None  # inside the tree
    assert member_problem("/etc/passwd") == "a path that leaves the tree"
    assert member_problem("a/../../b") == "a path that leaves the tree"
    assert member_problem("a/l", "/") == "a link to the absolute path '/'"
    assert member_problem("a/l", "../..").startswith("a link out of the tree")
    assert member_problem("a/l", "b/../../../c").startswith("a link out of the tree")


def test_a_head_adding_a_non_utf8_test_name_is_refused_by_that_name(tmp_path, capsys):
    repo = _checkout(tmp_path, {b"test/registered/test_\xff.py": REGISTERED})
    err = _refused(capsys, "--out", tmp_path / "out", "--root", repo, "--git-base", "main",
                   "--git-head", "head")  # fmt: skip
    assert "test/registered/test_\\udcff.py" in err and "--tests" not in err, err
    assert "a test file name the report refuses" in err and err.endswith("nothing ran"), err


def test_file_names_the_report_refuses_are_refused_before_anything_runs(tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    for name in ("test_\u00e9.py", "test_q'\"x.py", "test_\u202ebidi.py", "test_a\nb.py"):
        (root / name).write_text(REGISTERED)
        err = _refused(capsys, "--out", tmp_path / "out", "--root", root, "--tests", name)
        assert "a test file name the report refuses" in err, err
        assert "\u202e" not in err and "\n" not in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


REMOVES_THE_LOGS = """
import os, shutil, unittest

import sglang  # each side's


def register_cpu_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time=5, suite="base-a-test-cpu")


class T(unittest.TestCase):
    def test_removes_the_logs(self):
        shutil.rmtree(os.path.join(os.environ["THE_OUT"], "logs"), ignore_errors=True)
        os.makedirs(os.path.join(os.environ["THE_OUT"], "logs", "planted"), exist_ok=True)


if __name__ == "__main__":
    unittest.main()
"""


def test_a_run_through_a_looping_link_and_removed_logs_and_a_version_the_report_refuses(tmp_path):
    """One ci run for three breaks: a folder link to its own folder is named and not
    followed (each file runs once per side); a test that removes --out/logs loses no log; a
    side whose sglang says a version the report would refuse (over 100 characters) fails the
    run in one line, where it passed before."""
    root, out, tree = tmp_path / "root", tmp_path / "out", tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)
    version = "0.5.23+" + "x" * 120
    (tree / "python" / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_logs.py").write_text(REMOVES_THE_LOGS)
    os.symlink(".", root / "tests" / "loop")
    (tmp_path / "none.txt").write_text("")
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", "--root",
            str(root), "--tests", "tests", "--regressions", str(tmp_path / "none.txt"),
            "--change-src", str(tree)]  # fmt: skip
    env = clean_env(THE_OUT=str(out))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "Traceback" not in said, said
    assert "tests/loop: a link to a folder: not followed" in proc.stderr, said
    assert proc.stderr.count("tests/test_logs.py: exit 0") == 2, said  # once per side
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "ci report would refuse these results" in errors[0], said
    assert "sides.change.sglang: 127 characters; at most 100" in errors[0], errors
    assert sorted(p.name for p in (out / "logs").iterdir()) == [
        "tests_test_logs.py.change.log",
        "tests_test_logs.py.unmodified.log",
    ]
    data = json.loads((out / "results.json").read_text())  # kept: nothing lost
    assert {"file": "tests/loop", "why": "a link to a folder: not followed (its tests are not "
            "run through it)"} in data["selection"]["not_run"]  # fmt: skip
    assert [c["kind"] for c in data["cases"]] == ["preservation"]


def test_the_dirty_tree_message_names_the_whole_path(tmp_path):
    from ci.runner import git_sides

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "abc.py").write_text("x = 1\n")
    git("add", "abc.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "abc.py").write_text("x = 2\n")  # " M abc.py": modified, not staged
    with pytest.raises(git_sides.RequestError) as refused:
        git_sides.read_change(str(tmp_path), "HEAD", "HEAD")
    assert "uncommitted changes (abc.py...)" in str(refused.value), refused.value


KILLS_ITS_PARENT = """
import os, signal, unittest


class T(unittest.TestCase):
    def test_x(self):
        pass


if __name__ == "__main__":
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
        parent = handle.read()
    # only ever the preloading parent, never the test run that started it all (RUNNER)
    if b"preload.py" in parent and os.getppid() != RUNNER:
        os.kill(os.getppid(), signal.SIGKILL)
    unittest.main()
"""


def test_the_preload_record_stops_saying_forked_once_its_parent_died(tmp_path):

    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(f"RUNNER = {os.getpid()}\n" + KILLS_ITS_PARENT)
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=clean_env())
    preloads = {}
    runs = launch.run_all(["test_a.py", "test_b.py"], {"change": env}, str(tmp_path), 60, 1,
                          lambda _: None, ("json",), preloads)  # fmt: skip
    assert len(runs) == 2
    record = preloads["change"]
    assert record["forked"] is False and "preloading parent failed" in record["error"], record


PASSES = (
    """
import unittest
"""
    + REGISTERED
    + """


class T(unittest.TestCase):
    def test_x(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""
)


def test_a_file_name_never_starts_a_workflow_command_on_stderr_or_stdout(tmp_path):
    forged = "\n::error title=forged::the bot says so"
    root = tmp_path / "root"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / f"test_x{forged}.py").write_text(PASSES)
    (root / "tests" / "test_ok.py").write_text(PASSES)
    (tmp_path / "none.txt").write_text("")

    def ci_run(*tests):
        argv = [sys.executable, "-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend",
                "cpu", "--root", str(root), "--tests", *tests,
                "--regressions", str(tmp_path / "none.txt")]  # fmt: skip
        proc = subprocess.run(
            argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600
        )
        for line in (proc.stdout + proc.stderr).splitlines():
            assert not line.strip().startswith("::"), line
            assert "##[" not in line, line
        return proc

    # Such a file name is refused before it runs (issue 34, break 10): named, in one line.
    refused = ci_run(f"tests/test_x{forged}.py")
    assert refused.returncode == 2 and "a test file name the report refuses" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # A folder link's name reaches the progress lines: defused there too.
    os.rename(root / "tests" / f"test_x{forged}.py", tmp_path / "away.py")
    os.symlink(".", root / "tests" / f"loop{forged}")
    ran = ci_run("tests")
    assert "exit 0" in ran.stderr and "a link to a folder: not followed" in ran.stderr, ran.stderr


def test_run_records_each_cases_def_line_for_its_annotation(tmp_path):
    lines = collect.test_lines(".", FILE)
    assert lines and all(isinstance(n, int) and n > 1 for n in lines.values())
    with open(FILE) as handle:
        source = handle.read().splitlines()
    for key, line in lines.items():
        assert source[line - 1].lstrip().startswith(("def " + key.split(".")[-1], "async def "))
    assert collect.line_of(lines, "TestX.test_y[3]") is None
    assert collect.line_of({"test_y": 7}, "test_y[3]") == 7
