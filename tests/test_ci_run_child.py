"""How ``ci run`` runs one file: any style, fresh or forked, nothing outlives it."""

import os
import signal

import pytest
from conftest import alive, clean_env, until

from ci.evidence import judge
from ci.runner import collect, launch, sides

FILES = {
    "test_unittest.py": """
import unittest


class T(unittest.TestCase):
    def test_pass(self):
        pass

    def test_fail(self):
        self.assertEqual(1, 2, "one is not two")

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("not here")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_expected(self):
        self.fail("expected")

    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(i, 0)


class Broken(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("the server never came up")

    def test_never(self):
        pass


if __name__ == "__main__":
    unittest.main()
""",
    "test_pytest_style.py": """
import sys

import pytest


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
""",
    "test_forks.py": """
import os, time, unittest


class T(unittest.TestCase):
    def test_leaves_a_process(self):
        pid = os.fork()
        if pid == 0:  # a child that reports too, then lingers: neither may count
            unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Ghost))
            time.sleep(120)
            os._exit(0)
        os.write(1, f"grandchild {pid}\\n".encode())  # one write: the grandchild logs too


class Ghost(unittest.TestCase):
    def test_ghost(self):
        pass


if __name__ == "__main__":
    unittest.main(defaultTest="T")
""",
    "test_sets_env.py": """
import os, unittest

os.environ["CHANGED_AT_IMPORT"] = "1"


class T(unittest.TestCase):
    def test_pass(self):
        pass


if __name__ == "__main__":
    unittest.main()
""",
}
EXPECTED = {
    "test_unittest.py": {
        "T.test_pass": "pass",
        "T.test_fail": "fail",
        "T.test_error": "error",
        "T.test_skip": "skip",
        "T.test_expected": "pass",
        "T.test_sub": "fail",
        "Broken.setUpClass": "error",
    },
    "test_pytest_style.py": {"test_param[1]": "pass", "test_param[2]": "fail"},
    "test_forks.py": {"T.test_leaves_a_process": "pass"},
    "test_sets_env.py": {"T.test_pass": "pass"},
}


# Forked from a serve that preloaded a module; a file that must start fresh forks from one that
# imported nothing (as every file does with --preload none): the same serve, with no modules.
@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forked")
    (folder / "logs").mkdir()
    for name, source in FILES.items():
        (folder / name).write_text(source)
    env = sides.environment(sides.SideSetup("change"), base=clean_env())
    tree = collect.Tree(str(folder), tuple(FILES))
    fresh = {p: why for p in FILES if (why := tree.fresh_reason(p))}
    runs, preloads = launch.run_all(list(FILES), {"change": env}, str(folder), 120, 2,
                                    lambda _: None, str(folder / "logs"), ("json",), fresh)  # fmt: skip
    return {run.path: run for run in runs}, preloads, fresh


@pytest.mark.parametrize("path", EXPECTED)
def test_every_style_of_test_file_reports_each_test_once(ran, path):
    runs, _, _ = ran
    tests, errors = judge.read_channel(runs[path].channel)
    assert errors == ()
    assert {t.test: t.outcome for t in tests} == EXPECTED[path], runs[path].output[-2000:]
    # the process's own record comes apart from the results
    assert '"python"' in runs[path].environment and '"process"' not in runs[path].channel


def test_a_file_that_changes_the_environment_as_it_is_imported_starts_fresh(ran):
    runs, preloads, fresh = ran
    assert list(fresh) == ["test_sets_env.py"]
    assert "line 4" in fresh["test_sets_env.py"]
    assert preloads["change"]["forked"] is True
    assert "preloaded" not in runs["test_sets_env.py"].environment
    assert "preloaded" in runs["test_unittest.py"].environment


def test_what_a_file_left_running_dies_with_it(ran):
    runs, _, _ = ran
    run = runs["test_forks.py"]
    pid = int(run.output.split("grandchild ", 1)[1].split()[0])
    try:
        assert run.end.returncode == 0 and run.end.duration_s < 60
        assert until(lambda: not alive(pid), within_s=30.0)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_file_past_its_timeout_is_killed_and_said_so(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "test_sleeps.py").write_text("import time\ntime.sleep(600)\n")
    env = sides.environment(sides.SideSetup("change"), base=clean_env())
    runs, _ = launch.run_all(["test_sleeps.py"], {"change": env}, str(tmp_path), 2, 1,
                             lambda _: None, str(tmp_path / "logs"))  # fmt: skip
    (run,) = runs
    assert run.end.timed_out and run.end.returncode is None and run.end.duration_s < 30
    assert run.end.log == "logs/test_sleeps.py.change.log"


def test_a_test_process_gets_an_allowlisted_environment_and_its_sides_settings():
    kept = {"PATH": "/bin", "LANG": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0", "SGLANG_X": "1"}
    dropped = {
        "GH_PAT": "x",
        "SSH_AUTH_SOCK": "/s",
        "DATABASE_URL": "x",
        "SGLANG_TEST_MAX_RETRY": "5",
    }
    env = sides.environment(sides.SideSetup("change", env={"MINE": "1"}), base=kept | dropped)
    assert set(kept) <= set(env) and not set(dropped) & set(env)
    assert env["MINE"] == "1" and env["SGLANG_IS_IN_CI"] == "true"
