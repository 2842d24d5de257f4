"""``python -m tools.series`` check, apply --to, refresh, materialize, matrix and refusals."""

import os
import shutil
import subprocess
import sys
import tempfile
from email import message_from_bytes
from email.policy import default
from email.utils import parseaddr
from pathlib import Path

import pytest

from ci import gitcmd
from tools.series import base, check, matrix, seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import REPO_ROOT

pytest_plugins = ["series_fixtures"]

FIX = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"


def _run(capsys, *argv):
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def checkout(series, dest):
    from series_fixtures import checkout  # a plugin module: imported once pytest loaded it

    return checkout(series, dest)


def _head(repo):
    return gitcmd.out(["rev-parse", "HEAD"], repo)


def test_check_applies_the_series_to_the_pinned_base(capsys):
    code, out, err = _run(capsys, "check")
    assert code == 0, err
    assert "identical to the project's file" in out and out.rstrip().endswith("ok")
    assert "upstream hook black 24.10.0: ok" in out and "upstream hook codespell 2.4.1" in out
    assert "0000-cover-letter.patch: introduces 12 patches (not applied by git am)" in out
    for fix in ("0001", "0003", "0005", "0007", "0009", "0011"):
        assert f"fix {fix} (" in out and ") applies alone to sglang==0.5.23" in out


def _add_patch(series, root, tmp_path, edit, subject) -> str:
    """A 13th patch in the copy ``root``: ``edit(repo)`` on the applied series, committed."""
    repo = checkout(series, tmp_path / "sglang")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    edit(repo)
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", **gitcmd.TOOL_IDENTITY}
    gitcmd.run(["add", "-A", "--sparse"], repo)
    gitcmd.run(["commit", "-qm", subject], repo, env=who)
    gitcmd.run(["format-patch", "-q", "-1", "-o", str(tmp_path / "out")], repo)
    (generated,) = (tmp_path / "out").glob("*.patch")
    name = "0013-" + generated.name.split("-", 1)[1]
    shutil.copy2(generated, root / "patches" / name)
    with (root / "patches" / "series").open("a") as listing:
        listing.write(name + "\n")
    cover = root / "patches" / "0000-cover-letter.patch"
    cover.write_bytes(cover.read_bytes().replace(b"[PATCH 00/12]", b"[PATCH 00/13]", 1))
    return name


def test_check_refuses_a_fix_that_needs_the_one_before_it(capsys, tmp_path, series, project):
    # Its hunk has 0001's new lines as context: the series applies, the fix alone does not.
    root = project

    def reword(repo):
        text = (repo / FIX).read_text()
        (repo / FIX).write_text(text.replace("so a replacement peaks", "so replacing peaks"))

    name = _add_patch(series, root, tmp_path, reword, "[DSV4] Reword the comment")
    code, _, err = _run(capsys, "--patches", root / "patches", "check")
    assert code == 1, err
    assert "fix 0013 does not apply without the rest of the series" in err
    assert f"{name}: {FIX}: hunk #1" in err


def test_check_never_reads_through_a_link_the_series_adds(capsys, tmp_path, series, project):
    secret = tmp_path / "secret.py"
    secret.write_text("x=  'SECRET-TOKEN-123'\n")  # what black would print back, were it read
    root = project

    def link(repo):  # relative: the same link text each run, so the hooks' verdict is cached
        (repo / "python/sglang/leak.py").symlink_to("../../../secret.py")

    _add_patch(series, root, tmp_path, link, "Add a link")
    code, out, err = _run(capsys, "--patches", root / "patches", "check")
    assert "SECRET-TOKEN-123" not in out + err
    assert code == 1 and "check-ast fails on python/sglang/leak.py" in err  # the link text


def _corrupt(root, name, old, new):
    path = next(root.glob(name))
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1) if new is not None else data[:-400])


# (file in the project copy, bytes replaced, replacement or None: cut the end) -> what err says
CHECK_REFUSALS = {
    "test-differs": ((TEST, b"MIB = 1 << 20", b"MIB = 1 << 21"),
                     ("0002-", "differs from the project's file", "first difference at line ")),
    "hunk-does-not-apply": (("patches/0001-*.patch", b" current_dtype = self._buffer.dtype",
                             b" current_dtype = self.dt"),
                            (f"0001-dsv4-sparse-prefill-release-first.patch: {FIX}: hunk #1",
                             "git am aborted, nothing applied")),
    "truncated": (("patches/0001-*.patch", b"\n", None), ("corrupt patch: 0001-", "corrupt patch at line")),
}  # fmt: skip


@pytest.mark.parametrize("case", CHECK_REFUSALS)
def test_check_names_what_fails_in_one_line_and_exits_1(capsys, project, case):
    (path, old, new), said = CHECK_REFUSALS[case]
    root = project
    _corrupt(root, path, old, new)
    code, out, err = _run(capsys, "--patches", root / "patches", "check")
    assert code == 1 and out == "", err
    assert all(part in err for part in said), err


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch):
    cases = [
        (["materialize", "--version", "0.0.0.post999", tmp_path / "x"],
         "sglang==0.0.0.post999 is not on PyPI"),
        (["apply", "--to", tmp_path / "nowhere"], "is not an upstream sglang checkout"),
        (["apply", "--to", tmp_path], "is not an upstream sglang checkout"),
        (["apply", "--fix", "0002", "--to", tmp_path], "no fix starting at that patch"),
        (["refresh", "--from", tmp_path], "is not a git checkout made by 'materialize'"),
        (["--patches", tmp_path, "describe"], "series is missing"),
        (["materialize", "--version", "latest", tmp_path / "x"], "'latest' is not a release version"),
    ]  # fmt: skip
    for argv, said in cases:
        code, out, err = _run(capsys, *argv)
        assert (code, out, len(err.splitlines())) == (2, "", 1) and said in err, (argv, err)
    with open("/dev/full", "w") as full:  # a full disk
        proc = subprocess.run([sys.executable, "-m", "tools.series", "describe"], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (2, "error: No space left on device\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = _run(capsys, "check")
    assert code == 2 and err == "error: git: No such file or directory\n"
    # a foreign checkout's own hooks and collector are run by no flag (--checkout is gone)
    with pytest.raises(SystemExit) as exc:
        main(["check", "--checkout", str(tmp_path)])
    assert exc.value.code == 2


# sglang 0.5.23's base commit as built from the wheel on any machine
BASE_0_5_23 = "dc55f224f0cd424ba9f3dac845f04c01adf15849"


def test_materialize_gives_the_reproducible_base_commit_across_filesystems(tmp_path, series):
    # on tmpfs where it is another filesystem than the cache's (no hard links)
    shm = Path("/dev/shm")
    devices = {base.CACHE_DIR.stat().st_dev, tmp_path.stat().st_dev}
    other = shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev not in devices
    where = Path(tempfile.mkdtemp(prefix="series-other-fs-", dir=shm)) if other else tmp_path
    try:
        repo = base.materialize(series.base.version, where / "sglang")  # the whole tree
        assert _head(repo) == BASE_0_5_23
        assert (repo / "python/sglang/__init__.py").is_file() and (repo / FIX).is_file()
    finally:
        if other:
            shutil.rmtree(where)


def test_run_as_a_git_hook_it_leaves_the_callers_repository_alone(monkeypatch, tmp_path, series):
    caller = tmp_path / "caller"
    gitcmd.run(["init", "-q", str(caller)], tmp_path)
    # What git exports to a hook in a linked worktree (check is a pre-commit hook).
    monkeypatch.setenv("GIT_DIR", str(caller / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(caller / ".git" / "index"))
    repo = checkout(series, tmp_path / "sglang")
    assert gitcmd.out(["rev-parse", "--show-toplevel"], repo) == str(repo)
    assert not gitcmd.ok(["rev-parse", "-q", "--verify", "HEAD"], caller)  # nothing landed there


def test_apply_commits_one_fix_or_the_series_and_refuses_what_is_applied(capsys, tmp_path, series):
    repo = checkout(series, tmp_path / "sglang")
    start = _head(repo)
    code, out, err = _run(capsys, "apply", "--fix", "0003", "--to", repo)
    assert code == 0, err
    assert out.splitlines() == [f"{name}: committed in {repo}" for name in series.fix("0003").names]
    assert (repo / FIX).read_bytes() == base.blob(repo, FIX)  # the other fix's file: untouched
    code, _, err = _run(capsys, "apply", "--fix", "0003", "--to", repo)
    assert code == 1 and "already has the series applied" in err
    code, _, err = _run(capsys, "apply", "--to", repo)
    assert code == 1 and "partly patched (0003-" in err
    for fix in ("0001", "0005", "0007", "0009", "0011"):
        code, _, err = _run(capsys, "apply", "--fix", fix, "--to", repo)
        assert code == 0, err
    applied = _head(repo)
    code, _, err = _run(capsys, "apply", "--to", repo)
    assert code == 1 and "already has the series applied" in err and _head(repo) == applied
    subjects = gitcmd.out(["log", "--reverse", "--format=%s", f"{start}..HEAD"], repo).splitlines()
    prefixes = ["DFlash"] * 2 + ["DSV4"] * 2 + ["DFlash"] * 2 + ["DSA", "DSA", "DSV4", "DSV4"]
    assert [s.split(":")[0] for s in subjects] == prefixes + ["DSA", "DSA"]  # kept by git am
    assert (repo / TEST).read_bytes() == (REPO_ROOT / TEST).read_bytes()


# patch -> (bytes replaced, replacement) -> its matrix cell: each fix tried on its own files
MATRIX = {
    "0001": (b"\n-            self._head_source = None", b"\n-            x = 0",
             "fails (sparse_prefill_utils.py hunk #1)"),
    "0003": (b"@@ -372,6 +372,13 @@", b"@@ -369,6 +369,13 @@", "clean (hunk #1 offset +3)"),
    "0005": (b"\n         buffer = self._draft_probs_buf\n", b"\n         buffer = 0\n",
             "fuzz (applies with 1 line of context)"),
}  # fmt: skip


def test_matrix_tries_each_fix_on_its_own_files(project):
    for number, (old, new, _) in MATRIX.items():
        _corrupt(project, f"patches/{number}-*.patch", old, new)
    row = matrix.release_row(seriesdir.load(project / "patches"), "0.5.23")
    cells = {name[:4]: matrix.cell(result) for name, result in row["patches"].items()}
    want = {f"{n:04d}": "clean" for n in range(1, 13)}
    assert cells == want | {number: cell for number, (_, _, cell) in MATRIX.items()}


def test_apply_refuses_a_dirty_checkout_and_one_it_does_not_apply_to(capsys, tmp_path, series):
    repo = checkout(series, tmp_path / "sglang")
    target = repo / FIX
    target.write_bytes(target.read_bytes().replace(b"current_dtype = self._buffer.dtype", b"x = 0"))
    code, _, err = _run(capsys, "apply", "--to", repo)
    assert code == 1 and "uncommitted changes" in err and FIX in err
    who = gitcmd.TOOL_IDENTITY | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    gitcmd.run(["commit", "-qam", "diverge"], repo, env=who)
    head = _head(repo)
    code, _, err = _run(capsys, "apply", "--to", repo)
    assert code == 1 and "hunk #1" in err and "is unchanged" in err
    assert _head(repo) == head and gitcmd.dirty_paths(repo) == []


def _files(root):
    return {p.name: p.read_bytes() for p in (root / "patches").iterdir() if p.is_file()}


# Who refreshes (GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL), or None: whoever refreshed last.
@pytest.mark.parametrize("who", [None, ("Zoë Maintainer", "zoe@example.org")])
def test_refresh_rewrites_the_series_authored_by_the_refresher(
    capsys, project, patched_tree, monkeypatch, who
):
    before = _files(project)
    first = message_from_bytes(
        before[next(n for n in before if n.startswith("0001-"))], policy=default
    )
    name, email = who or parseaddr(str(first["From"]))
    monkeypatch.setenv("GIT_AUTHOR_NAME", name)
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", email)
    argv = ["--patches", project / "patches", "refresh", "--from", patched_tree]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    after = _files(project)
    if who is None:  # byte for byte what is committed: as git format-patch writes it
        assert after == before and out.count(": unchanged") == 13, out
        return
    for patch in sorted(after):
        if patch.endswith(".patch"):
            new, old = message_from_bytes(after[patch]), message_from_bytes(before[patch])
            assert parseaddr(str(message_from_bytes(after[patch], policy=default)["From"])) == who
            assert new["Date"] == old["Date"], patch  # the commits' dates, not the refresh's
    cover = [seriesdir.parse_cover(files[seriesdir.COVER_NAME]) for files in (before, after)]
    assert cover[0] == cover[1]  # its subject and blurb kept; git's shortlog rewritten:
    assert b"\nZo\xc3\xab Maintainer (12):\n" in after[seriesdir.COVER_NAME]
    code, _, err = _run(capsys, "--patches", project / "patches", "check")  # git am takes it
    assert code == 0, err


def test_refresh_without_a_git_identity_is_one_line_and_exit_2(
    capsys, tmp_path, project, patched_tree, monkeypatch
):
    before = _files(project)
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "gitconfig").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    argv = ["--patches", project / "patches", "refresh", "--from", patched_tree]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no git identity to author the patches" in err
    assert _files(project) == before
