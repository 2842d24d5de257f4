"""Reading ``patches/``: series, ``BASE``, patches, fixes, git's failures, wheel, matrix."""

import fcntl
import zipfile
from dataclasses import replace

import pytest

from ci import gitcmd
from tools.series import SeriesError, base, check, matrix, seriesdir
from tools.series.seriesdir import PATCHES_DIR, load, parse_patch

FIX = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
CPU_TEST = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
FIX_BYTES = (PATCHES_DIR / load().names[0]).read_bytes()


def test_the_first_fix_parses_to_one_file_one_hunk_releasing_before_allocating():
    patch = parse_patch(FIX_BYTES, "0001")
    assert patch.files == ((FIX, False),)
    diff = seriesdir.diff_section(patch.data)
    assert diff.count(b"\n@@ ") == 1 and b"\n+            self._buffer = None\n" in diff
    assert patch.subject.startswith("DSV4: ")  # a prefix plain git am keeps
    for section in ("Motivation", "Modifications", "Tests"):
        assert f"\n{section}\n" in f"\n{patch.body}\n"


@pytest.mark.parametrize(
    "data, said",
    [
        (FIX_BYTES[: FIX_BYTES.index(b"+            self._buffer = None")],
         r"corrupt patch: 0001: corrupt patch at line \d+"),
        (FIX_BYTES.replace(b"\n+            self._buffer = None", b"\n*garbage", 1),
         r"corrupt patch: 0001: corrupt patch at line \d+"),
        (b"diff --git a/x b/x\n", "not a git format-patch"),
    ],
    ids=["truncated-hunk", "stray-line", "no-from-line"],
)  # fmt: skip
def test_a_corrupt_patch_is_named_with_its_line(data, said):
    with pytest.raises(SeriesError, match=said):
        parse_patch(data, "0001")


@pytest.mark.parametrize(
    "parse, text, said",
    [
        ("series", "0001-a.patch\n0001-a.patch\n", r"series:2: .* listed twice"),
        ("series", "fix.diff\n", r"series:1: 'fix.diff' is not"),
        ("series", "0000-cover-letter.patch\n", "series:1: .* is the cover letter"),
        ("series", "0001-a.patch -p1\n", "series:1: '0001-a.patch -p1' is not"),
        ("base", "release: sglang==0.5.23\nfile: x.py sha256=nothex\n", "BASE:2: .* needs sha256"),
        ("base", "release: sglang==latest\n", "not a release version"),
        ("base", "release: torch==2.0\n", "BASE:1: expected 'release: sglang==X.Y.Z'"),
        ("base", "file: x.py new\n", "BASE: no 'release: sglang==X.Y.Z' line"),
        ("base", "release: sglang==0.5.23\ncut: 0001 x when y contains z\n", "BASE:2: unknown key 'cut'"),
        ("base", "git: " + "a" * 40 + "\n", "BASE:1: unknown key 'git'"),
    ],
)  # fmt: skip
def test_a_bad_series_or_base_line_is_named(parse, text, said):
    reader = seriesdir.parse_series if parse == "series" else seriesdir.parse_base
    with pytest.raises(SeriesError, match=said):
        reader(text, parse if parse == "series" else "BASE")


def test_a_fix_is_a_patch_that_changes_sglang_and_the_test_only_patches_after_it():
    series = load()
    assert [(f.number, len(f.patches)) for f in series.fixes] == [
        ("0001", 2), ("0003", 2), ("0005", 2), ("0007", 2), ("0009", 2), ("0011", 2)
    ]  # fmt: skip
    dsv4, fused, _, dsa_q8, _, born_q = series.fixes
    assert dsv4.touched_files() == {FIX: False, TEST: True, CPU_TEST: True}
    # a second fix of the same file is a fix of its own
    assert next(iter(dsa_q8.touched_files())) == next(iter(born_q.touched_files()))
    # Each fix's id is made like the series' from its own patches alone.
    assert dsv4.id == seriesdir.series_id("0.5.23", [p.data for p in series.patches[:2]])
    assert series.fix("3") == fused
    with pytest.raises(SeriesError, match="no fix starting at that patch") as err:
        series.fix("0002")
    assert err.value.code == 2


def test_test_only_patches_join_the_fix_before_them_and_lead_alone_when_first():
    paths = [("t", "test/registered/a.py"), ("f", "python/sglang/x.py"),
             ("t", "test/registered/c.py"), ("t", "test/d.py"), ("g", "python/sglang/y.py")]  # fmt: skip
    patches = [
        seriesdir.Patch(f"000{i}-{kind}.patch", "s", "b", b"", ((path, True),))
        for i, (kind, path) in enumerate(paths, 1)
    ]
    series = replace(load(), names=tuple(p.name for p in patches), patches=tuple(patches))
    assert [fix.names for fix in series.fixes] == [
        ("0001-t.patch",),
        ("0002-f.patch", "0003-t.patch", "0004-t.patch"),
        ("0005-g.patch",),
    ]


HUNK = "hunk #1 @@ -113,12 @@ (class SparsePrefillKVBuffer:)"


@pytest.mark.parametrize(
    "output, said",
    [
        (f"error: patch failed: {FIX}:113\nerror: {FIX}: patch does not apply\n",
         f"0001-x.patch: {FIX}: {HUNK} does not apply"),
        (f"error: patch failed: {FIX}:120\n", f"0001-x.patch: {FIX}: {HUNK} does not apply"),
        (f"error: {FIX}: does not exist in index\n",
         f"0001-x.patch: {FIX}: the file does not exist in the target"),
        (f"error: {TEST}: already exists in working directory\n",
         f"0001-x.patch: {TEST}: the file it adds already exists in the target"),
        ("fatal: something else\n", "0001-x.patch: does not apply (fatal: something else)"),
    ],
    ids=["at-its-start", "at-an-offset", "missing", "exists", "other"],
)  # fmt: skip
def test_gits_failure_is_told_as_patch_file_and_hunk(output, said):
    assert check.explain(output, parse_patch(FIX_BYTES, "0001-x.patch")) == [said]


def test_wheel_members_map_to_upstream_without_dist_info_or_compiled_extensions(tmp_path):
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member in ("sglang/srt/x.py", "sglang-0.5.23.dist-info/RECORD", "sglang/srt/_s.so"):
            archive.writestr(member, b"x")
    assert [path for path, _, _ in base.upstream_files(wheel)] == ["python/sglang/srt/x.py"]


def test_the_base_cache_is_built_by_one_process_at_a_time(tmp_path, monkeypatch):
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


def test_the_matrix_cell_is_short():
    failed = {"status": "fails", "detail": f"{FIX}: {HUNK} does not apply"}
    rows = [{"version": "0.5.22", "patches": {"0001-a.patch": failed}},
            {"version": "0.5.23", "patches": {"0001-a.patch": {"status": "clean", "detail": ""}}}]  # fmt: skip
    table = matrix.render_table(["0001-a.patch"], rows)
    assert "| 0.5.22 | fails (sparse_prefill_utils.py hunk #1) |" in table
    assert "| 0.5.23 | clean |" in table
