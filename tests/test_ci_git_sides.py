"""``ci run --git-base REV --git-head REV``: both sides made from a checkout in sglang's layout
(``sglang_layout``: sglang 0.5.23 with upstream-style tests, a branch with the fix and one
without), the tests picked from the diff, the user's checkout left as it was, bad input refused.
"""

import json
import os
import subprocess
import sys

import pytest
import sglang_layout
from conftest import REPO, clean_env
from sglang_layout import ADDED, MODIFIED

from ci.__main__ import main


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    return sglang_layout.make_repo(tmp_path_factory.mktemp("layout") / "sglang")


def ci_run(checkout, out, *args):
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--root", str(checkout)]
    return subprocess.run(
        [*argv, "--backend", "cpu", *args],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def git(checkout, *args):
    return subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True).stdout


def test_the_fix_branch_picks_its_tests_from_the_diff_and_proves_the_regression(checkout, tmp_path):
    before = (git(checkout, "status", "--porcelain"), git(checkout, "worktree", "list"))
    out = tmp_path / "out"
    proc = ci_run(checkout, out, "--git-base", "main", "--git-head", "fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    # The CUDA test the branch adds is not for this backend; the unchanged file is not in the diff.
    assert data["selection"]["files"] == [ADDED, MODIFIED]
    assert data["selection"]["git"]["added"] == [sglang_layout.CUDA_TEST, ADDED]
    assert data["selection"]["git"]["modified"] == [MODIFIED]
    kinds = {c["file"]: c["kind"] for c in data["cases"]}
    assert kinds == {ADDED: "regression", MODIFIED: "preservation"}
    commits = {mode: git(checkout, "rev-parse", rev).strip() for mode, rev in
               (("unmodified", "main"), ("change", "fix"))}  # fmt: skip
    assert {m: s["commit"] for m, s in data["sides"].items()} == commits
    assert data["sides"]["change"]["label"].endswith(f"@ {commits['change'][:12]}")
    # Both sides are gone from --out, and the checkout, its index and worktrees are untouched.
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["results.json", "summary.txt", "junit-unmodified.xml", "junit-change.xml", "logs"]
    )
    assert (git(checkout, "status", "--porcelain"), git(checkout, "worktree", "list")) == before
    assert git(checkout, "branch", "--show-current").strip() == "main"


def test_a_head_that_fails_its_own_tests_exits_1(checkout, tmp_path):
    proc = ci_run(checkout, tmp_path / "out", "--git-base", "main", "--git-head", "tests-only")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("ci run: 1 fail with sglang (version unknown) @ "), line
    assert "test_replacement_releases_the_old_scratch_before_allocating" in line
    assert not (tmp_path / "out" / "sides").exists()


def _refused(capsys, *args):
    code = main(["run", "--out", "unused", "--backend", "cpu", *map(str, args)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def test_an_unknown_ref_is_one_line_and_exit_2_and_the_index_is_left_as_it_was(checkout, capsys):
    # A file touched since the index last saw it: a plain ``git status`` would rewrite the index.
    os.utime(checkout / MODIFIED, (10**9, 10**9))
    index = (checkout / ".git" / "index").read_bytes()
    err = _refused(capsys, "--root", checkout, "--git-base", "main", "--git-head", "no-such-branch")
    assert err == f"error: --git-head 'no-such-branch': no such commit in {checkout}"
    assert (checkout / ".git" / "index").read_bytes() == index


def test_a_tree_not_in_sglangs_layout_is_one_line_and_exit_2(checkout, capsys):
    # The tag ``base`` is the bare release: python/sglang, no test/registered.
    err = _refused(capsys, "--root", checkout, "--git-base", "main", "--git-head", "base")
    assert err == "error: --git-head base: no test/registered/ in it (not sglang's layout)"


def test_a_dirty_work_tree_is_one_line_and_exit_2(checkout, capsys, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--local", str(checkout), str(clone)], check=True)
    (clone / MODIFIED).write_text("# an edit nobody committed\n")
    err = _refused(capsys, "--root", clone, "--git-base", "origin/main", "--git-head", "origin/fix")
    assert err.startswith(f"error: --root {clone}: the work tree has uncommitted changes")
    assert (clone / MODIFIED).read_text() == "# an edit nobody committed\n"


def test_a_folder_that_is_no_checkout_and_half_a_pair_are_refused(checkout, capsys, tmp_path):
    err = _refused(capsys, "--root", tmp_path, "--git-base", "main", "--git-head", "fix")
    assert err == f"error: --root {tmp_path}: not the top of a git checkout"
    err = _refused(capsys, "--root", checkout, "--git-base", "main")
    assert err == "error: --git-base and --git-head go together"


@pytest.mark.parametrize(
    "head, more, said",
    [
        ("main", [], "main adds or modifies no registered test file under test/registered"),
        ("fix", ["--suite", "base-c-test-cpu"], "none of the registered test files fix adds"),
    ],
)
def test_a_head_that_changes_no_selected_test_has_nothing_to_run(
    checkout, tmp_path, head, more, said
):
    out = tmp_path / "out"
    proc = ci_run(checkout, out, "--git-base", "main", "--git-head", head, *more)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"ci run: nothing to run: {said}"), proc.stdout
    assert not (out / "results.json").exists() and not (out / "sides").exists()


def test_every_git_of_the_project_ignores_a_callers_repository(tmp_path, monkeypatch):
    # Inside a git hook GIT_DIR names the caller's repository: the checkout's commit that ci run
    # records, and what the series tools read, must still be the folder's own (ci.gitcmd).
    from ci import gitcmd
    from ci.runner import sides

    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    identity.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    heads = {}
    for name in ("project", "caller"):
        (tmp_path / name).mkdir()
        for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", name]):
            gitcmd.run(args, tmp_path / name, env=identity)
        heads[name] = gitcmd.out(["rev-parse", "HEAD"], tmp_path / name)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "caller" / ".git"))
    recorded = sides.git_commit(str(tmp_path / "project"))
    assert recorded == {"commit": heads["project"], "dirty": False}


# --- what a side is written with --------------------------------------------------------------

SIDE_FILES = """import os
import sys
import unittest


def register_cpu_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time=1, suite="base-a-test-cpu")


class TestSideFiles(unittest.TestCase):
    def test_each_side_holds_its_package_and_the_head_its_tests_only(self):
        side = os.path.dirname(os.environ["PYTHONPATH"].split(os.pathsep)[0])
        head = os.getcwd()
        self.assertEqual(sorted(os.listdir(head)), ["python", "test"])
        self.assertEqual(sorted(os.listdir(side)), ["python"] if side != head else ["python", "test"])


if __name__ == "__main__":
    unittest.main()
"""


def _small_checkout(root, head_files: dict):
    """A checkout in sglang's layout with a folder no test needs (``docs``): ``main``, and
    branch ``pr`` adding ``head_files`` (path -> text, or ``("link", target)``)."""
    root.mkdir()
    env = {**clean_env(), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.invalid",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.invalid"}  # fmt: skip

    def run(*args):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)

    for path, text in {"python/sglang/__init__.py": "", "docs/README.md": "docs\n"}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    run("init", "-q", "-b", "main")
    run("add", "-A")
    run("commit", "-q", "-m", "base")
    run("checkout", "-q", "-b", "pr")
    for path, text in head_files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, tuple):
            os.symlink(text[1], root / path)
        else:
            (root / path).write_text(text)
    run("add", "-A")
    run("commit", "-q", "-m", "pr")
    return root


def test_the_base_side_is_its_python_folder_and_the_head_adds_only_its_tests(tmp_path):
    test = "test/registered/unit/test_side_files.py"
    checkout = _small_checkout(tmp_path / "sglang", {test: SIDE_FILES})
    proc = ci_run(checkout, tmp_path / "out", "--git-base", "main", "--git-head", "pr")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [(c["file"], c["kind"]) for c in data["cases"]] == [(test, "preservation")]
