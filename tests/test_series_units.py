"""The small parts of series/: reading patches, path mapping, pins, failure messages, rendering.

No pip, no sglang, git only to read a patch: every test here runs in well under a second.
"""

import zipfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ci import gitcmd
from tools.series import SeriesError, apply, base, check, matrix, seriesdir
from tools.series.seriesdir import PATCHES_DIR, REPO_ROOT, load, parse_patch

FIX = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
CPU_TEST = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"


def _fix_patch_bytes():
    series = load()
    return (PATCHES_DIR / series.names[0]).read_bytes()


def test_fix_patch_parses_to_one_file_one_hunk_releasing_before_allocating():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    assert patch.files == ((FIX, False),)
    diff = seriesdir.diff_section(patch.data)
    assert diff.count(b"\n@@ ") == 1
    assert b"\n+            self._buffer = None\n" in diff
    assert b"\n+            self._head_source = None\n" in diff
    assert patch.subject.startswith("[DSV4] ")
    for section in ("Motivation", "Modifications", "Tests"):
        assert f"\n{section}\n" in f"\n{patch.body}\n"


def test_series_adds_the_projects_registered_test_byte_for_byte(tmp_path):
    series = load()
    assert series.patches[1].files == ((TEST, True), (CPU_TEST, True))
    gitcmd.run(["apply", str(series.paths()[1])], tmp_path, ceiling=tmp_path.parent)
    for test in (TEST, CPU_TEST):
        assert (tmp_path / test).read_bytes() == (REPO_ROOT / test).read_bytes()


def test_hunk_at_finds_the_hunk_git_names_by_its_old_start_line():
    data = _fix_patch_bytes()
    hunk = "hunk #1 @@ -113,12 @@ (class SparsePrefillKVBuffer:)"
    assert check.hunk_at(data, FIX, 113) == hunk
    assert check.hunk_at(data, FIX, 120) == hunk  # git searched at an offset
    assert check.hunk_at(data, TEST, 113) is None


def test_truncated_hunk_is_a_corrupt_patch_naming_the_line():
    data = _fix_patch_bytes()
    cut = data[: data.index(b"+            self._buffer = None")]
    with pytest.raises(SeriesError, match=r"corrupt patch: 0001: corrupt patch at line \d+"):
        parse_patch(cut, "0001")


def test_stray_line_inside_a_hunk_is_a_corrupt_patch():
    data = _fix_patch_bytes().replace(b"\n+            self._buffer = None", b"\n*garbage", 1)
    with pytest.raises(SeriesError, match=r"corrupt patch: 0001: corrupt patch at line \d+"):
        parse_patch(data, "0001")


def test_text_without_from_line_is_not_a_format_patch():
    with pytest.raises(SeriesError, match="not a git format-patch"):
        parse_patch(b"diff --git a/x b/x\n", "x.patch")


def test_installed_package_gets_python_sglang_files_and_skips_the_rest():
    (_, fix, fix_skipped), (_, test, test_skipped), *_ = apply._package_plan(load())
    assert (fix, fix_skipped) == (["srt/layers/attention/dsv4/sparse_prefill_utils.py"], [])
    assert (test, test_skipped) == ([], [TEST, CPU_TEST])


def test_a_fix_is_a_patch_that_changes_sglang_and_the_test_only_patches_after_it():
    series = load()
    numbers = [(fix.number, len(fix.patches)) for fix in series.fixes]
    assert numbers == [("0001", 2), ("0003", 2), ("0005", 2), ("0007", 2), ("0009", 2), ("0011", 2)]
    dsv4, fused, _draft_probs, dsa_q8, _dsv4_q8, born_q = series.fixes
    assert dsv4.touched_files() == {FIX: False, TEST: True, CPU_TEST: True}
    assert list(fused.touched_files()) == [
        "python/sglang/kernels/ops/speculative/fused_kv_materialize.py",
        "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py",
        "test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_release_order.py",
    ]
    assert list(dsa_q8.touched_files()) == [
        "python/sglang/srt/layers/attention/dsa_backend.py",
        "test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py",
        "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py",
    ]
    # a second fix of the same file is a fix of its own
    assert list(born_q.touched_files()) == [
        "python/sglang/srt/layers/attention/dsa_backend.py",
        "test/registered/kernels/ops/attention/test_dsa_q8kv8_born_q_peak.py",
        "test/registered/unit/layers/attention/test_dsa_q8kv8_born_q_release_order.py",
    ]
    # Each fix's id is made like the series' from its own patches alone.
    assert dsv4.id == seriesdir.series_id("0.5.23", [p.data for p in series.patches[:2]])
    assert series.fix("3") is fused or series.fix("3") == fused
    with pytest.raises(SeriesError, match="no fix starting at that patch") as err:
        series.fix("0002")
    assert err.value.exit_code == 2


def _patch(name, *paths):
    return seriesdir.Patch(name, "s", "b", b"", tuple((path, True) for path in paths))


def test_test_only_patches_join_the_fix_before_them_and_lead_alone_when_first():
    patches = [
        _patch("0001-t.patch", "test/registered/a.py"),
        _patch("0002-f.patch", "python/sglang/x.py", "test/registered/b.py"),
        _patch("0003-t.patch", "test/registered/c.py"),
        _patch("0004-t.patch", "test/d.py"),
        _patch("0005-g.patch", "python/sglang/y.py"),
    ]
    fixes = seriesdir.group_fixes("0.5.23", patches)
    assert [fix.names for fix in fixes] == [
        ("0001-t.patch",),
        ("0002-f.patch", "0003-t.patch", "0004-t.patch"),
        ("0005-g.patch",),
    ]


def test_wheel_members_map_to_upstream_without_dist_info_or_compiled_extensions(tmp_path):
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member in ("sglang/srt/x.py", "sglang-0.5.23.dist-info/RECORD", "sglang/srt/_s.so"):
            archive.writestr(member, b"x")
    assert [path for path, _, _ in base.upstream_files(wheel)] == ["python/sglang/srt/x.py"]


@given(st.lists(st.from_regex(r"[0-9]{4}-[a-z0-9-]{1,20}\.patch", fullmatch=True), unique=True))
def test_series_file_round_trips(names):
    assert seriesdir.parse_series(seriesdir.render_series(names)) == names


def test_series_file_errors_name_the_line():
    with pytest.raises(SeriesError, match=r"series:2: .* listed twice"):
        seriesdir.parse_series("0001-a.patch\n0001-a.patch\n", "series")
    with pytest.raises(SeriesError, match=r"series:1: 'fix.diff' is not"):
        seriesdir.parse_series("fix.diff\n", "series")


def test_base_pin_round_trips_and_rejects_a_bad_digest():
    pin = seriesdir.Base("0.5.23", ((FIX, "a" * 64), (TEST, seriesdir.NEW)))
    assert seriesdir.parse_base(seriesdir.render_base(pin)) == pin
    with pytest.raises(SeriesError, match="BASE:2: .* needs sha256"):
        seriesdir.parse_base("release: sglang==0.5.23\nfile: x.py sha256=nothex\n", "BASE")
    with pytest.raises(SeriesError, match="not a release version"):
        seriesdir.parse_base("release: sglang==latest\n", "BASE")


def test_am_failure_is_explained_as_patch_file_and_hunk():
    patch = parse_patch(_fix_patch_bytes(), "0001-x.patch")
    output = (
        "Applying: [DSV4] Free sparse-prefill KV scratch\n"
        f"error: patch failed: {FIX}:113\nerror: {FIX}: patch does not apply\n"
        "Patch failed at 0001 [DSV4] Free sparse-prefill KV scratch\n"
    )
    (problem,) = check.explain(output, patch)
    assert problem.startswith(f"0001-x.patch: {FIX}: hunk #1 @@ -113,12 @@")


def test_package_relative_paths_from_git_apply_are_mapped_back_to_upstream():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    output = "error: patch failed: srt/layers/attention/dsv4/sparse_prefill_utils.py:113\n"
    (problem,) = check.explain(output, patch, prefix=apply.UPSTREAM_PACKAGE)
    assert f"{FIX}: hunk #1" in problem


def test_missing_file_is_reported_as_missing_in_the_target():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    (problem,) = check.explain(f"error: {FIX}: does not exist in index\n", patch)
    assert "does not exist in the target" in problem


def test_first_difference_names_the_line():
    assert check.first_difference(b"a\nb\nc\n", b"a\nB\nc\n") == "line 2"
    assert "longer" in check.first_difference(b"a\n", b"a\nb\n")


def test_classify_separates_clean_offset_fuzz_and_fails():
    assert matrix.classify(True, "Applied patch x cleanly.", True) == ("clean", "")
    offset = "Hunk #1 succeeded at 120 (offset 7 lines)."
    assert matrix.classify(True, offset, True) == ("clean", "hunk #1 offset +7")
    assert matrix.classify(False, "", True)[0] == "fuzz"
    assert matrix.classify(False, "", False)[0] == "fails"


def test_table_has_one_row_per_release_and_short_failure_details():
    rows = [
        {
            "version": "0.5.22",
            "patches": {
                "0001-a.patch": {
                    "status": "fails",
                    "detail": f"{FIX}: hunk #1 @@ -113,12 @@ (class X:) does not apply",
                }
            },
        },
        {"version": "0.5.23", "patches": {"0001-a.patch": {"status": "clean", "detail": ""}}},
    ]
    table = matrix.render_table(["0001-a.patch"], rows)
    assert "| 0.5.22 | fails (sparse_prefill_utils.py hunk #1) |" in table
    assert "| 0.5.23 | clean |" in table


def test_the_base_cache_is_built_by_one_process_at_a_time_and_a_waiter_takes_it(
    tmp_path, monkeypatch
):
    import fcntl

    monkeypatch.setattr(base, "CACHE_DIR", tmp_path)
    lock_path = tmp_path / "bases" / ".0.5.23.lock"
    held, builds = [], []

    def build(version, dest):  # a base repository with its tag, as _build leaves one
        with open(lock_path) as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
            except BlockingIOError:
                held.append(True)
        for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"]):
            gitcmd.run(args, dest, env=gitcmd.TOOL_IDENTITY)
        gitcmd.run(["tag", base.BASE_TAG], dest)
        builds.append(version)

    monkeypatch.setattr(base, "_build", build)
    first = base.cached_base("0.5.23")
    assert held == [True]  # another builder would have waited on the lock
    assert base.cached_base("0.5.23") == first and builds == ["0.5.23"]


@pytest.mark.parametrize(
    "variables, expected",
    [
        ({"XDG_CACHE_HOME": "/x/cache"}, "/x/cache/sglang-overlay"),
        ({"XDG_CACHE_HOME": "relative/cache", "HOME": "/h"}, "/h/.cache/sglang-overlay"),
        ({"HOME": "/h"}, "/h/.cache/sglang-overlay"),
        ({"SGLANG_SERIES_CACHE": "/one/place", "XDG_CACHE_HOME": "/x"}, "/one/place"),
        ({"HOME": ""}, str(REPO_ROOT / ".cache")),  # no home: this clone's own folder
    ],
)
def test_upstreams_hooks_are_kept_per_user_unless_one_cache_folder_is_named(variables, expected):
    # Installing upstream's hooks took a fresh clone's first check about 40 s: every clone
    # and worktree of a user shares them, as pre-commit shares its own store.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "SGLANG_SERIES_CACHE", "HOME")}  # fmt: skip
    code = "from tools.series import base; print(base.HOOKS_CACHE_DIR)"
    proc = subprocess.run([sys.executable, "-c", code], env={**env, **variables},
                          cwd=REPO_ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    assert proc.stdout.strip() == expected


def test_a_hooks_folder_that_cannot_be_written_is_one_line_and_exit_2(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(base, "HOOKS_CACHE_DIR", tmp_path / "file" / "below")
    with pytest.raises(SeriesError) as raised:
        check.ensure_env()
    said = str(raised.value)
    assert raised.value.exit_code == 2 and len(said.splitlines()) == 1, said
    assert said.startswith(f"cannot write upstream's hooks into {tmp_path}/file/below/") and (
        "Not a directory; set XDG_CACHE_HOME or SGLANG_SERIES_CACHE" in said
    )
