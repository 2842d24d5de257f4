"""``apply``, ``matrix``, ``refresh``, ``pr-body`` and ``ab`` against a git checkout base
(``--checkout PATH [--rev REV]`` or ``$SGLANG_CHECKOUT``, the convention of ``check`` and
``materialize``; ``tools/series/basearg.py``), rehearsed on the drifted-main repository
(``series_fixtures.drifted_main``: HEAD has upstream's per-ratio DSV4 file, HEAD~1 main's
tooling on the 0.5.23 tree, HEAD~2 the 0.5.23 tree), and a ``patches/BASE`` of the git kind."""

import json
from email.utils import parseaddr

import pytest
from test_series_prbody import FUSED_KV_RESULTS, _results
from test_series_tools import _author_header, _project_copy

from ci.reporter.render import escape_inline
from ci import gitcmd
from tools.series import ab, basearg, check, seriesdir
from tools.series.__main__ import main

pytest_plugins = ["series_fixtures"]


def _run(capsys, *argv):
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _clone_at(drifted_main, tmp_path, rev: str, name="main"):
    """A clone of the rehearsal main with a branch checked out at ``rev``."""
    clone = tmp_path / name
    gitcmd.run(["clone", "-q", "--local", str(drifted_main), str(clone)], tmp_path)
    gitcmd.run(["checkout", "-q", "-B", "work", rev], clone)
    return clone


def _git_base(tmp_path, commit: str):
    """A copy of the project whose patches/BASE is the git base ``commit``."""
    root = _project_copy(tmp_path)
    pinned = seriesdir.load(root / "patches").base
    git = seriesdir.Base(None, pinned.files, commit, "the rehearsal main")
    (root / "patches" / "BASE").write_text(seriesdir.render_base(git))
    return root / "patches"


def test_a_git_base_names_its_commit_in_the_ids_and_what_describe_prints(tmp_path):
    # ci run --series refuses a record without a release; two commits are two bases.
    ids = []
    for commit in ("a" * 40, "b" * 40):
        series = seriesdir.load(_git_base(tmp_path / commit[0], commit))
        summary = seriesdir.summary(series)
        assert summary["release"] == f"git:{commit}"
        ids.append((series.id, [f.id for f in series.fixes]))
    assert ids[0][0] != ids[1][0] and not set(ids[0][1]) & set(ids[1][1])
    release = seriesdir.load(_project_copy(tmp_path / "r") / "patches")
    assert seriesdir.summary(release)["release"] == "0.5.23"  # a release base: ids unchanged


def test_matrix_of_the_checkout_is_one_row_at_its_commit(capsys, drifted_main):
    code, out, err = _run(capsys, "matrix", "--checkout", drifted_main, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["version"] == "@ " + gitcmd.out(["rev-parse", "HEAD"], drifted_main)[:12]
    statuses = {name[:4]: result["status"] for name, result in row["patches"].items()}
    assert statuses == dict.fromkeys((f"{n:04d}" for n in range(1, 13)), "clean") | {
        "0001": "fails"
    }
    detail = row["patches"]["0001-dsv4-sparse-prefill-release-first.patch"]["detail"]
    assert detail.startswith(
        "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py: hunk #1"
    )


def test_matrix_takes_the_checkout_from_the_environment_and_its_rev(
    capsys, drifted_main, monkeypatch
):
    monkeypatch.setenv("SGLANG_CHECKOUT", str(drifted_main))
    code, out, err = _run(capsys, "matrix", "--rev", "HEAD~2")
    assert code == 0, err
    assert "| @ " + gitcmd.out(["rev-parse", "HEAD~2"], drifted_main)[:12] + " | clean |" in out
    assert "fails" not in out and "0.5.23" not in out.splitlines()[2]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["matrix", "--rev", "HEAD"], "--rev HEAD: of which checkout?"),
        (["matrix", "--checkout", "{main}", "--rev", "no-such-rev"], "has no commit no-such-rev"),
        (["check", "--version", "0.5.23", "--checkout", "{main}"], "name two bases; give one"),
        (["apply", "--fix", "0003"], "apply needs --to PATH (or --checkout PATH"),
        (["refresh"], "refresh needs --from DIR (made by materialize) or --checkout PATH"),
        (["refresh", "--from", "{main}", "--rev", "HEAD"], "--checkout and --rev name another"),
        (["pr-body", "--results", "{main}", "--no-check", "--rev", "HEAD"], "of which checkout?"),
    ],
)
def test_bad_base_arguments_are_one_line_and_exit_2(capsys, drifted_main, argv, said):
    argv = [arg.replace("{main}", str(drifted_main)) for arg in argv]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and said in _one_line(err), err


def test_apply_to_the_checkout_commits_one_fix_on_its_base(capsys, drifted_main, tmp_path):
    clone = _clone_at(drifted_main, tmp_path, "HEAD~1")
    before = gitcmd.out(["rev-parse", "HEAD"], clone)
    code, out, err = _run(capsys, "apply", "--checkout", clone, "--rev", before, "--fix", "0003")
    assert code == 0, err
    assert out.count(f"committed in {clone}") == 2
    assert gitcmd.out(["rev-parse", "HEAD~2"], clone) == before


def test_apply_refuses_a_checkout_that_is_not_at_the_base_in_one_line(
    capsys, drifted_main, tmp_path
):
    clone = _clone_at(drifted_main, tmp_path, "HEAD~1")
    base_commit = gitcmd.out(["rev-parse", "HEAD~1"], clone)
    code, out, err = _run(capsys, "apply", "--to", clone, "--rev", base_commit)
    assert code == 2 and out == ""
    assert f"is at {gitcmd.out(['rev-parse', 'HEAD'], clone)[:12]}, but the base is" in _one_line(
        err
    )
    assert gitcmd.out(["rev-parse", "HEAD"], clone) != base_commit  # nothing changed


def test_a_git_base_decides_where_apply_may_put_the_series(capsys, drifted_main, tmp_path):
    clone = _clone_at(drifted_main, tmp_path, "HEAD~2")
    patches = _git_base(tmp_path, gitcmd.out(["rev-parse", "HEAD~1"], drifted_main))
    code, _, err = _run(capsys, "--patches", patches, "apply", "--to", clone, "--fix", "0003")
    assert code == 2 and "but the base is" in _one_line(err)
    gitcmd.run(["reset", "-q", "--hard", seriesdir.load(patches).base.git], clone)
    code, out, err = _run(capsys, "--patches", patches, "apply", "--to", clone, "--fix", "0003")
    assert code == 0 and out.count("committed in") == 2, err


def test_a_git_base_without_a_checkout_is_one_line_and_exit_2(capsys, drifted_main, tmp_path):
    patches = _git_base(tmp_path, gitcmd.out(["rev-parse", "HEAD~1"], drifted_main))
    code, _, err = _run(capsys, "--patches", patches, "check")
    assert code == 2 and "a git base: give --checkout PATH" in _one_line(err)


def _same_author(monkeypatch, patches):
    name, email = parseaddr(_author_header(patches))
    monkeypatch.setenv("GIT_AUTHOR_NAME", name)
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", email)


def test_refresh_from_a_checkout_writes_a_git_base_at_its_revision(
    capsys, series, drifted_main, tmp_path, monkeypatch
):
    clone = _clone_at(drifted_main, tmp_path, "HEAD~1")
    upstream = gitcmd.out(["rev-parse", "HEAD"], clone)
    check.am_series(series, clone, env=gitcmd.TOOL_IDENTITY)
    patches = _project_copy(tmp_path) / "patches"
    before = {p.name: p.read_bytes() for p in patches.glob("*.patch")}
    _same_author(monkeypatch, patches)
    code, out, err = _run(
        capsys, "--patches", patches, "refresh", "--checkout", clone, "--rev", upstream
    )
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in patches.glob("*.patch")} == before
    text = (patches / "BASE").read_text()
    assert f"\ngit: {upstream}\n" in text and "release:" not in text
    pinned = seriesdir.load(patches).base
    assert (pinned.version, pinned.git) == (None, upstream)
    assert pinned.files == series.base.files  # the same bytes under the touched paths
    # A git base is the default --rev of the other verbs: materialize takes that commit.
    dest = tmp_path / "base"
    code, _, err = _run(capsys, "--patches", patches, "materialize", "--checkout", clone, dest)
    assert code == 0, err
    assert gitcmd.out(["rev-parse", "base^{commit}"], dest) == upstream


def test_refresh_from_a_tree_materialised_from_a_checkout_writes_a_git_base(
    capsys, series, drifted_main, tmp_path, monkeypatch
):
    tree = tmp_path / "tree"
    assert main(["materialize", "--checkout", str(drifted_main), "--rev", "HEAD~1", str(tree)]) == 0
    check.am_series(series, tree, env=gitcmd.TOOL_IDENTITY)
    patches = _project_copy(tmp_path) / "patches"
    _same_author(monkeypatch, patches)
    code, _, err = _run(capsys, "--patches", patches, "refresh", "--from", tree)
    assert code == 0, err
    assert seriesdir.load(patches).base.git == gitcmd.out(["rev-parse", "HEAD~1"], drifted_main)


def test_refresh_refuses_a_dirty_checkout_in_one_line(capsys, drifted_main, tmp_path):
    clone = _clone_at(drifted_main, tmp_path, "HEAD~1")
    (clone / "python" / "sglang" / "stray.py").write_text("")
    patches = _project_copy(tmp_path) / "patches"
    before = (patches / "BASE").read_bytes()
    code, _, err = _run(
        capsys, "--patches", patches, "refresh", "--checkout", clone, "--rev", "HEAD"
    )
    assert code == 2 and "has uncommitted changes (first: python/sglang/stray.py)" in _one_line(err)
    assert (patches / "BASE").read_bytes() == before


def _on_commit(commit: str):
    def edit(data):
        for side in data["sides"].values():
            side.update(commit=commit, label=f"sglang 0.5.23 @ {commit[:12]}")

    return edit


def test_pr_body_against_a_checkout_labels_the_columns_by_its_upstream_commit(
    capsys, drifted_main, tmp_path
):
    commit = gitcmd.out(["rev-parse", "HEAD~1"], drifted_main)
    folder = _results(tmp_path, _on_commit(commit), source=FUSED_KV_RESULTS)
    code, out, err = _run(
        capsys, "pr-body", "--results", folder, "--fix", "0003", "--no-check",
        "--checkout", drifted_main, "--rev", "HEAD~1",
    )  # fmt: skip
    assert code == 0, err
    short = commit[:12]
    # escape_inline keeps '@' from being a mention (a word joiner after it), as for any label.
    label = escape_inline(f"sglang @ {short}")
    assert f"| case | kind | {label} | {label} + this PR |" in out
    assert f"git checkout {commit}\n" in out and "| sglang 0.5.23 |" not in out


def test_pr_body_refuses_results_made_on_another_commit_of_the_checkout(
    capsys, drifted_main, tmp_path
):
    other = gitcmd.out(["rev-parse", "HEAD~2"], drifted_main)
    folder = _results(tmp_path, _on_commit(other), source=FUSED_KV_RESULTS)
    code, out, err = _run(
        capsys, "pr-body", "--results", folder, "--fix", "0003", "--no-check",
        "--checkout", drifted_main, "--rev", "HEAD~1",
    )  # fmt: skip
    assert code == 1 and out == ""
    short = gitcmd.out(["rev-parse", "HEAD~1"], drifted_main)[:12]
    assert f"but the base is sglang @ {short}; run the A/B on that base" in _one_line(err)


def test_ab_plans_its_trees_from_the_checkouts_commit(series, drifted_main, tmp_path):
    commit = gitcmd.out(["rev-parse", "HEAD~1"], drifted_main)
    where = basearg.Where(None, drifted_main, commit)
    made = ab.plan(series, series.fix("0003"), tmp_path / "out", "cpu", where)
    assert made.unmodified.name == f"sglang-{commit[:12]}"
    assert made.change.name == f"sglang-{commit[:12]}-fix-0003"
    assert where.materialize(made.unmodified) == made.unmodified
    assert gitcmd.out(["rev-parse", "HEAD"], made.unmodified) == commit
