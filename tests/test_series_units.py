"""The pure parts of tools/: patch parsing, path mapping, pins, failure messages, rendering.

No git, no pip, no sglang: every test here runs in milliseconds.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from series import failures, layout, matrix, pins
from series.errors import SeriesError
from series.patchfile import PatchFormatError, added_file_bytes, hunk_at, parse_patch
from series.seriesdir import PATCHES_DIR, REPO_ROOT, load

FIX = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
TEST = "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py"


def _fix_patch_bytes():
    series = load()
    return (PATCHES_DIR / series.names[0]).read_bytes()


def test_fix_patch_parses_to_one_file_one_hunk_releasing_before_allocating():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    assert [d.path for d in patch.files] == [FIX]
    (hunk,) = patch.file(FIX).hunks
    added = [line for line in hunk.lines if line.startswith(b"+")]
    assert b"+            self._buffer = None" in added
    assert b"+            self._head_source = None" in added
    assert patch.subject.startswith("[DSV4] ")
    for section in ("Motivation", "Modifications", "Tests"):
        assert f"\n{section}\n" in f"\n{patch.body}\n"


def test_series_adds_the_projects_registered_test_byte_for_byte():
    series = load()
    diff = series.patches[1].file(TEST)
    assert diff.new_file
    assert added_file_bytes(diff) == (REPO_ROOT / TEST).read_bytes()


def test_hunk_at_finds_the_hunk_git_names_by_its_old_start_line():
    diff = parse_patch(_fix_patch_bytes(), "0001").file(FIX)
    assert hunk_at(diff, diff.hunks[0].old_start).index == 1
    assert "hunk #1 @@ -113,12 @@" in diff.hunks[0].describe()


def test_truncated_hunk_is_a_corrupt_patch_naming_file_and_line():
    data = _fix_patch_bytes()
    cut = data[: data.index(b"+            self._buffer = None")]
    with pytest.raises(PatchFormatError, match=r"0001:\d+: hunk #1 is truncated"):
        parse_patch(cut, "0001")


def test_stray_line_inside_a_hunk_is_a_corrupt_patch():
    data = _fix_patch_bytes().replace(b"\n+            self._buffer = None", b"\n*garbage", 1)
    with pytest.raises(PatchFormatError, match=r"0001:\d+: hunk #1 has a line that is not"):
        parse_patch(data, "0001")


def test_text_without_from_line_is_not_a_format_patch():
    with pytest.raises(PatchFormatError, match="not a git format-patch"):
        parse_patch(b"diff --git a/x b/x\n", "x.patch")


@pytest.mark.parametrize(
    "upstream, installed",
    [
        (FIX, "sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"),
        (TEST, None),
        ("python/pyproject.toml", None),
        ("python/sglang/", None),
    ],
)
def test_installed_path_maps_python_sglang_to_sglang_and_drops_the_rest(upstream, installed):
    assert layout.installed_path(upstream) == installed


def test_wheel_members_map_to_upstream_without_dist_info_or_compiled_extensions():
    assert layout.wheel_member_to_upstream("sglang/srt/x.py") == "python/sglang/srt/x.py"
    assert layout.wheel_member_to_upstream("sglang-0.5.23.dist-info/RECORD") is None
    assert layout.wheel_member_to_upstream("sglang/srt/_server.cpython-311-x86_64.so") is None


@given(st.lists(st.from_regex(r"[0-9]{4}-[a-z0-9-]{1,20}\.patch", fullmatch=True), unique=True))
def test_series_file_round_trips(names):
    assert pins.parse_series(pins.render_series(names)) == names


def test_series_file_errors_name_the_line():
    with pytest.raises(SeriesError, match=r"series:2: .* listed twice"):
        pins.parse_series("0001-a.patch\n0001-a.patch\n", "series")
    with pytest.raises(SeriesError, match=r"series:1: 'fix.diff' is not"):
        pins.parse_series("fix.diff\n", "series")


def test_base_pin_round_trips_and_rejects_a_bad_digest():
    base = pins.Base("0.5.23", ((FIX, "a" * 64), (TEST, pins.NEW)))
    assert pins.parse_base(pins.render_base(base)) == base
    with pytest.raises(SeriesError, match="BASE:2: .* needs sha256"):
        pins.parse_base("release: sglang==0.5.23\nfile: x.py sha256=nothex\n", "BASE")
    with pytest.raises(SeriesError, match="not a release version"):
        pins.parse_base("release: sglang==latest\n", "BASE")


def test_am_failure_is_explained_as_patch_file_and_hunk():
    patch = parse_patch(_fix_patch_bytes(), "0001-x.patch")
    output = (
        "Applying: [DSV4] Free sparse-prefill KV scratch\n"
        f"error: patch failed: {FIX}:113\nerror: {FIX}: patch does not apply\n"
        "Patch failed at 0001 [DSV4] Free sparse-prefill KV scratch\n"
    )
    assert failures.failing_patch_index(output) == 0
    (problem,) = failures.explain(output, patch)
    assert problem.startswith(f"0001-x.patch: {FIX}: hunk #1 @@ -113,12 @@")


def test_package_relative_paths_from_git_apply_are_mapped_back_to_upstream():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    output = "error: patch failed: srt/layers/attention/dsv4/sparse_prefill_utils.py:113\n"
    (problem,) = failures.explain(output, patch, prefix=layout.UPSTREAM_PACKAGE)
    assert f"{FIX}: hunk #1" in problem


def test_missing_file_is_reported_as_missing_in_the_target():
    patch = parse_patch(_fix_patch_bytes(), "0001")
    (problem,) = failures.explain(f"error: {FIX}: does not exist in index\n", patch)
    assert "does not exist in the target" in problem


def test_first_difference_names_the_line():
    assert failures.first_difference(b"a\nb\nc\n", b"a\nB\nc\n") == "line 2"
    assert "longer" in failures.first_difference(b"a\n", b"a\nb\n")


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
