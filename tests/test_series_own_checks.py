"""``check`` on a checkout base also runs what that checkout runs on a pull request: its own
``.pre-commit-config.yaml`` hooks on the files the series touches and its own
``test/run_suite.py`` collector on the registered files the series adds (issue 33,
deliverable 4). Rehearsed on the drifted-main repository (``series_fixtures.drifted_main``), at
``HEAD~1`` where the series applies: main's tooling, before its DSV4 change."""

import pytest

from tools.series import SeriesError, base, check, gitcmd, own_checks
from tools.series.__main__ import main

pytest_plugins = ["series_fixtures"]


def _own_hooks(extra: str) -> bytes:
    """The rehearsal main's hooks config with one hook more."""
    from series_fixtures import OWN_HOOKS

    return (OWN_HOOKS + extra).encode()


RUN_SUITE = "test/run_suite.py"
CPU_FILES = (
    "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py",
    "test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_release_order.py",
)


def _main_with(drifted_main, tmp_path, files: dict) -> tuple:
    """A clone of the rehearsal main at HEAD~1 with ``files`` committed on top: (clone, the
    new commit)."""
    from series_fixtures import commit_files

    clone = tmp_path / "main"
    gitcmd.run(["clone", "-q", "--local", str(drifted_main), str(clone)], tmp_path)
    gitcmd.run(["checkout", "-q", "-B", "work", "HEAD~1"], clone)
    return clone, commit_files(clone, files, "main changes its tooling")


def _applied(series, checkout, rev, tmp_path):
    """The series applied on ``rev`` of ``checkout``, as ``check`` has it."""
    repo = base.materialize_checkout(checkout, rev, tmp_path / "checked")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    return repo


def test_check_of_the_rehearsal_main_runs_its_own_hooks_and_its_own_collector(
    capsys, series, drifted_main
):
    code = main(["check", "--checkout", str(drifted_main), "--rev", "HEAD~1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    commit = gitcmd.out(["rev-parse", "HEAD~1"], drifted_main)[:12]
    touched = len(series.touched_files())
    hooks = f"sglang @ {commit}: its own hooks (.pre-commit-config.yaml) pass on {touched} files"
    assert f"{hooks}: py-compile, no-conflict-markers\n" in out
    assert (
        f"sglang @ {commit}: its own test/run_suite.py collects 12 files (12 registrations)" in out
    )
    assert out.rstrip().endswith("ok")


def test_a_hook_of_the_checkout_failing_on_what_the_series_adds_is_one_line_and_exit_1(
    series, drifted_main, tmp_path
):
    hook = """\
      - id: no-weakref
        name: tests use no weak references
        entry: "^import weakref"
        language: pygrep
        files: ^test/
"""
    clone, rev = _main_with(drifted_main, tmp_path, {".pre-commit-config.yaml": _own_hooks(hook)})
    repo = _applied(series, clone, rev, tmp_path)
    with pytest.raises(SeriesError) as raised:
        own_checks.hooks(series, repo, "main")
    said = str(raised.value)
    assert raised.value.exit_code == 1 and len(said.splitlines()) == 1, said
    assert said.startswith("main: its own pre-commit hook no-weakref fails on test/registered/")
    assert f"no-weakref fails on {CPU_FILES[0]}: {CPU_FILES[0]}:" in said
    assert "import weakref" in said and "py-compile" not in said
    assert gitcmd.dirty_paths(repo) == []  # the tree is as the series left it


def test_a_hook_failure_the_base_already_has_is_reported_and_not_counted(
    series, drifted_main, tmp_path
):
    # Both the base and the series' sparse_prefill_utils.py call torch.empty( (0001 moves it).
    hook = """\
      - id: no-torch-empty
        name: no torch.empty in the DSV4 workspace
        entry: "torch\\\\.empty\\\\("
        language: pygrep
        files: sparse_prefill_utils\\.py$
"""
    clone, rev = _main_with(drifted_main, tmp_path, {".pre-commit-config.yaml": _own_hooks(hook)})
    lines = own_checks.hooks(series, _applied(series, clone, rev, tmp_path), "main")
    assert lines == [
        "main: its own hook no-torch-empty fails on "
        "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py as the base has it"
    ]


def test_a_fixer_hook_is_judged_by_what_it_changes_so_the_base_hides_no_new_problem(
    series, drifted_main, tmp_path
):
    # A fixer prints nothing: what it rewrites is its complaint. On the base it rewrites the
    # torch.empty( call only; with the series also the comment fix 0001 adds in that file.
    hook = """\
      - id: house-style
        name: house style rewrites
        entry: sed -i -e "s/torch[.]empty(/torch.empty (/" -e "s/Release the old scratch/Free the old scratch/"
        language: system
        files: sparse_prefill_utils\\.py$
"""
    clone, rev = _main_with(drifted_main, tmp_path, {".pre-commit-config.yaml": _own_hooks(hook)})
    repo = _applied(series, clone, rev, tmp_path)
    with pytest.raises(SeriesError) as raised:
        own_checks.hooks(series, repo, "main")
    said = str(raised.value)
    assert raised.value.exit_code == 1 and len(said.splitlines()) == 1, said
    assert said.startswith(
        "main: its own pre-commit hook house-style fails on "
        "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py: +"
    )
    assert "# Free the old scratch (and the head key" in said and "torch.empty (" not in said
    assert gitcmd.dirty_paths(repo) == []  # the fixer's edits are undone


def test_a_registered_file_the_checkouts_collector_rejects_is_one_line_and_exit_1(
    series, drifted_main, tmp_path
):
    # This main renamed its CPU suite: base-a-test-cpu is no longer one it knows.
    script = (drifted_main / RUN_SUITE).read_text().replace('"base-a-test-cpu", ', "")
    assert script != (drifted_main / RUN_SUITE).read_text()
    clone, rev = _main_with(drifted_main, tmp_path, {RUN_SUITE: script.encode()})
    with pytest.raises(SeriesError) as raised:
        own_checks.collector(series, _applied(series, clone, rev, tmp_path), "main")
    said = str(raised.value)
    assert raised.value.exit_code == 1 and len(said.splitlines()) == 1, said
    assert said.startswith("main: its own test/run_suite.py rejects test/registered/")
    for path in CPU_FILES:
        assert f"{path}: ValueError: tests registered to unknown suites" in said
    assert "base-a-test-cpu" in said and "test_fused_kv_workspace_peak.py" not in said


def test_a_run_suite_that_cannot_load_is_one_line_and_exit_2(series, drifted_main, tmp_path):
    broken = b"import a_module_this_main_lacks\n"
    clone, rev = _main_with(drifted_main, tmp_path, {RUN_SUITE: broken})
    with pytest.raises(SeriesError) as raised:
        own_checks.collector(series, _applied(series, clone, rev, tmp_path), "main")
    said = str(raised.value)
    assert raised.value.exit_code == 2 and len(said.splitlines()) == 1, said
    assert "cannot be loaded to collect tests" in said and "a_module_this_main_lacks" in said


def test_a_checkout_with_neither_says_so_in_one_line_each_and_goes_on(
    series, drifted_main, tmp_path
):
    # HEAD~2 is the 0.5.23 tree itself: no hooks config, no test/run_suite.py.
    repo = _applied(series, drifted_main, "HEAD~2", tmp_path)
    assert own_checks.run(series, repo, "main") == [
        "main has no .pre-commit-config.yaml: no hooks of its own to run",
        "main has no test/run_suite.py: no collector of its own to run",
    ]


def test_the_collector_sees_the_registered_files_the_series_adds_as_upstreams_glob(series):
    files = own_checks.registered_files(series)
    added = [
        p for p, new in series.touched_files().items() if new and p.startswith("test/registered/")
    ]
    assert files == added and len(files) == 12
