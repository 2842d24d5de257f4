"""``ci run --git-base REV --git-head REV`` on a checkout in sglang's layout."""

import json
import os
import subprocess

import ci_samples
import pytest
import sglang_layout
from sglang_layout import ADDED, MODIFIED

from ci import gitcmd
from ci.runner import sides

checkout = pytest.fixture(sglang_layout.checkout, scope="module", name="checkout")


def ci_run(capsys, checkout, out, *args):
    """``ci run`` in this process: (exit code, stdout, stderr)."""
    argv = ["run", "--out", out, "--root", checkout, "--backend", "cpu"]
    return ci_samples.cli(capsys, *argv, *args)


def git(checkout, *args):
    return gitcmd.out(list(args), checkout)


@pytest.mark.parametrize(
    "head, code, added", [("fix", 0, "regression"), ("tests-only", 1, "broken")]
)
def test_the_tests_come_from_the_diff_and_the_head_proves_or_fails_them(
    checkout, tmp_path, capsys, head, code, added
):
    before = (git(checkout, "status", "--porcelain"), git(checkout, "worktree", "list"))
    out = tmp_path / "out"
    said, out_text, err = ci_run(capsys, checkout, out, "--git-base", "main", "--git-head", head)
    assert said == code, out_text + err
    data = json.loads((out / "results.json").read_text())
    # The CUDA test the branch adds is not for this backend; the unchanged file is not in the diff.
    assert data["selection"]["files"] == [ADDED, MODIFIED]
    assert data["selection"]["git"]["added"] == [sglang_layout.CUDA_TEST, ADDED]
    assert data["selection"]["git"]["modified"] == [MODIFIED]
    kinds = {c["file"]: c["kind"] for c in data["cases"]}
    assert kinds == {ADDED: added, MODIFIED: "preservation"}
    commits = {
        m: git(checkout, "rev-parse", rev) for m, rev in (("unmodified", "main"), ("change", head))
    }
    assert {m: s["commit"] for m, s in data["sides"].items()} == commits
    assert data["sides"]["change"]["label"].endswith(f"@ {commits['change'][:12]}")
    # Both sides are gone from --out, and the checkout, its index and worktrees are untouched.
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["results.json", "summary.txt", "junit-unmodified.xml", "junit-change.xml", "logs"]
    )
    assert (git(checkout, "status", "--porcelain"), git(checkout, "worktree", "list")) == before
    assert git(checkout, "branch", "--show-current") == "main"


@pytest.mark.parametrize("shard, files", [("0/2", [MODIFIED]), ("1/2", [ADDED]), ("2/3", [])])
def test_each_shard_records_its_index_and_runs_its_part_or_says_it_has_none(
    checkout, tmp_path, capsys, shard, files
):
    git = ["--git-base", "main", "--git-head", "fix", "--shard", shard]
    code, said, err = ci_run(capsys, checkout, tmp_path / "out", *git)
    selection = json.loads((tmp_path / "out" / "results.json").read_text())["selection"]
    assert code == 0 and (selection["shard"], selection["files"]) == (shard, files), err
    none = f"ci run: shard {shard}: every selected file falls in another shard"
    assert files or said.splitlines()[-1] == none


@pytest.mark.parametrize(
    "root, args, said",
    [
        ("", ["--git-head", "no-such-branch"], "--git-head 'no-such-branch': no such commit in {root}"),
        # The tag ``base`` is the bare release: python/sglang, no test/registered.
        ("", ["--git-head", "base"], "--git-head base: no test/registered/ in it (not sglang's layout)"),
        ("tmp", ["--git-head", "fix"], "--root {root}: not the top of a git checkout"),
        ("", [], "--git-base and --git-head go together"),
        ("", ["--git-head", "fix", "--change-src", "."], "--git-base/--git-head make both sides"),
        ("clone", ["--git-head", "fix"],
         f"--root {{root}}: the work tree has uncommitted changes ({MODIFIED}...)"),
    ],
)  # fmt: skip
def test_bad_git_input_is_one_line_and_exit_2_and_the_checkout_is_left_as_it_was(
    checkout, tmp_path, capsys, root, args, said
):
    if root == "clone":
        root = tmp_path / "clone"
        subprocess.run(["git", "clone", "-q", "--local", str(checkout), str(root)], check=True)
        (root / MODIFIED).write_text("# an edit nobody committed\n")
    root = {"": checkout, "tmp": tmp_path}.get(root, root)
    # A file touched since the index last saw it: a plain ``git status`` would rewrite the index.
    os.utime(root / MODIFIED if (root / MODIFIED).exists() else root, (10**9, 10**9))
    index = (root / ".git/index").read_bytes() if (root / ".git").exists() else None
    code, _, err = ci_run(capsys, root, "unused", "--git-base", "main", *args)
    assert code == 2 and err.strip().startswith(f"error: {said.format(root=root)}"), err
    assert len(err.strip().splitlines()) == 1
    assert index is None or (root / ".git/index").read_bytes() == index


@pytest.mark.parametrize(
    "head, more, said",
    [
        ("main", [], "main adds or modifies no registered test file under test/registered"),
        ("fix", ["--suite", "base-c-test-cpu"], "none of the registered test files fix adds"),
    ],
)
def test_a_head_that_changes_no_selected_test_has_nothing_to_run(
    checkout, tmp_path, capsys, head, more, said
):
    out = tmp_path / "out"
    code, text, err = ci_run(capsys, checkout, out, "--git-base", "main", "--git-head", head, *more)
    assert code == 0 and text.startswith(f"ci run: nothing to run: {said}"), text + err
    assert not (out / "results.json").exists() and not (out / "sides").exists()


def test_every_git_of_the_project_ignores_a_callers_repository(tmp_path, monkeypatch):
    # In a git hook GIT_DIR names the caller's repository: ci run still reads the folder's own.
    heads = {}
    for name in ("project", "caller"):
        (tmp_path / name).mkdir()
        for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", name]):
            gitcmd.run(args, tmp_path / name, env=sglang_layout.IDENTITY)
        heads[name] = gitcmd.out(["rev-parse", "HEAD"], tmp_path / name)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "caller" / ".git"))
    assert sides.git_commit(str(tmp_path / "project")) == {
        "commit": heads["project"],
        "dirty": False,
    }
