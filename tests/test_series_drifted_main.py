"""The series against a drifted upstream main (issue 33): a local git repository standing for
main at 02e8ed1b, whose DSV4 workspace is per ratio and address-keyed
(``tests/series_fixtures.py``, ``drifted_main``). The rehearsal of a git base."""

import shutil

import pytest

from tools.series import SeriesError, check, gitcmd

pytest_plugins = ["series_fixtures"]
DRIFTED_FILE = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"


def test_the_rehearsal_holds_upstreams_per_ratio_workspace_in_place_of_0523s(drifted_main):
    text = (
        drifted_main / "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
    ).read_text()
    assert "class SparsePrefillWorkspace" in text and "dequantized_source" in text
    assert "SparsePrefillKVBuffer" not in text  # 0.5.23's class, which 0001 is cut against


def _patches(series, number):
    fix = series.fix(number)
    paths = dict(zip(series.names, series.paths(), strict=True))
    return [(name, paths[name], p) for name, p in zip(fix.names, fix.patches, strict=True)]


def test_the_0523_cut_of_fix_0001_is_named_with_its_file_and_hunk_on_the_drifted_main(
    series, drifted_main
):
    with pytest.raises(SeriesError) as raised:
        check.am_patches(_patches(series, "0001"), drifted_main)
    said = str(raised.value)
    assert "0001-dsv4-sparse-prefill-release-first.patch failed" in said
    assert "sparse_prefill_utils.py" in said and "hunk #1" in said
    assert gitcmd.run(["status", "--porcelain"], drifted_main).stdout == b""  # am aborted


def test_fix_0003_applies_to_the_drifted_main_unchanged(series, drifted_main, tmp_path):
    # 0003's context is identical in main's fused_kv_materialize.py (issue 33, at 51ccd1b0).
    clone = tmp_path / "sglang"
    gitcmd.run(["clone", "-q", "--local", str(drifted_main), str(clone)], tmp_path)
    check.am_patches(_patches(series, "0003"), clone, env=gitcmd.TOOL_IDENTITY)
    touched = gitcmd.run(["diff", "--name-only", "HEAD~2"], clone).stdout.decode().split()
    assert "python/sglang/kernels/ops/speculative/fused_kv_materialize.py" in touched


@pytest.fixture
def only_the_0523_cut(tmp_path):
    """patches/ without its ``cut:`` lines: the series knows only 0.5.23's cut of 0001."""
    from tools.series.seriesdir import PATCHES_DIR

    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    lines = (patches / "BASE").read_text().splitlines(keepends=True)
    (patches / "BASE").write_text("".join(x for x in lines if not x.startswith("cut:")))
    return patches


def test_check_against_the_checkout_names_the_0523_cut_in_one_line_and_exits_1(
    capsys, drifted_main, only_the_0523_cut
):
    from tools.series.__main__ import main

    code = main(["--patches", str(only_the_0523_cut), "check", "--checkout", str(drifted_main)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "0001-dsv4-sparse-prefill-release-first.patch" in err
    assert "sparse_prefill_utils.py: hunk #1 @@ -113,12 @@" in err


def test_check_refuses_a_folder_that_is_no_sglang_checkout_in_one_line(capsys, tmp_path):
    from tools.series.__main__ import main

    code = main(["check", "--checkout", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is not an sglang git checkout" in err


def test_materialize_from_the_checkout_tags_its_commit_base(capsys, drifted_main, tmp_path):
    from tools.series.__main__ import main

    dest = tmp_path / "base"
    assert main(["materialize", "--checkout", str(drifted_main), str(dest)]) == 0
    head = gitcmd.run(["rev-parse", "HEAD"], drifted_main).stdout
    assert gitcmd.run(["rev-parse", "base^{commit}"], dest).stdout == head
    assert "dequantized_source" in (dest / DRIFTED_FILE).read_text()


def test_check_against_the_checkout_takes_the_per_ratio_cut_of_0001_and_passes(
    capsys, drifted_main
):
    from tools.series.__main__ import main

    code = main(["check", "--checkout", str(drifted_main)])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("fix 0001 is the cut in patches/cuts/per-ratio-workspace/patches")
    assert "contains 'dequantized_source'" in lines[0] and "differ" not in lines[0]
    # the 0.5.23 cut's conflict, named in one line with its file and hunk
    assert lines[1].startswith("fix 0001 as patches/ cuts it does not apply here: ")
    assert "0001-dsv4-sparse-prefill-release-first.patch failed" in lines[1]
    assert "sparse_prefill_utils.py: hunk #1 @@ -113,12 @@" in lines[1]
    assert any(x.startswith("12 patches apply to") for x in lines) and lines[-1] == "ok"
    per_ratio = "fix 0001 (0001-dsv4-per-ratio-release-first-and-invalidate.patch, "
    assert any(x.startswith(per_ratio) and "applies alone" in x for x in lines)


def test_apply_to_the_drifted_main_commits_the_per_ratio_cut(series, drifted_main, tmp_path):
    from tools.series import apply

    clone = tmp_path / "sglang"
    gitcmd.run(["clone", "-q", "--local", str(drifted_main), str(clone)], tmp_path)
    report = apply.apply_to(series, clone, series.fix("0001"))
    assert report == [
        f"{name}: committed in {clone}"
        for name in (
            "0001-dsv4-per-ratio-release-first-and-invalidate.patch",
            "0002-dsv4-per-ratio-workspace-regression-test.patch",
        )
    ]
    text = (clone / DRIFTED_FILE).read_text()
    assert "self._buffer = None\n            self.generation += 1\n" in text
