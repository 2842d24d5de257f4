"""A fix cut twice (tools/series/cuts.py): patches/BASE's ``cut:`` lines, and the base's shape
choosing between a fix's cuts. Git and files only: no sglang, no pip."""

import hashlib
import json
import shutil

import pytest

from tools.series import SeriesError, cuts, seriesdir
from tools.series.seriesdir import PATCHES_DIR, load

DSV4 = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
CUT_DIR = PATCHES_DIR / "cuts/per-ratio-workspace"
CUT_NAMES = (
    "0001-dsv4-per-ratio-release-first-and-invalidate.patch",
    "0002-dsv4-per-ratio-workspace-regression-test.patch",
)


def _tree(tmp_path, text):
    (tmp_path / DSV4).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / DSV4).write_text(text)
    return tmp_path


def test_base_names_the_per_ratio_cut_of_fix_0001_and_renders_it_back():
    base = load().base
    assert base.cuts == (
        seriesdir.Cut("0001", "cuts/per-ratio-workspace/patches", DSV4, "dequantized_source"),
    )
    assert seriesdir.render_base(base) == (PATCHES_DIR / "BASE").read_text()


def test_a_malformed_cut_line_is_one_line_naming_where():
    for line in (
        "cut: 0001 cuts/x",
        "cut: 1 cuts/x when a.py contains y",
        "cut: 0001 ../elsewhere when a.py contains y",
    ):
        with pytest.raises(SeriesError) as raised:
            seriesdir.parse_base(f"release: sglang==0.5.23\n{line}\n", "BASE")
        assert str(raised.value).startswith("BASE:2: expected 'cut: NNNN FOLDER when PATH")
        assert "\n" not in str(raised.value)


def test_the_cut_is_a_series_of_one_fix_cut_against_upstream_main():
    cut = load(CUT_DIR / "patches")
    assert cut.names == CUT_NAMES and [f.number for f in cut.fixes] == ["0001"]
    assert cut.base.git == "02e8ed1b29acbafb42c52e9ef1209122e6fa67d9"
    fixture = (PATCHES_DIR.parent / "tests/fixtures/upstream_main").glob("*02e8ed1b*")
    pinned = dict(cut.base.files)[DSV4]
    assert hashlib.sha256(next(fixture).read_bytes()).hexdigest() == pinned


def test_a_base_of_the_release_shape_keeps_the_0523_cut(tmp_path):
    series = load()
    tree = _tree(tmp_path, "class SparsePrefillKVBuffer:\n    def _reserve(self): ...\n")
    chosen, taken = cuts.for_tree(series, tree)
    assert chosen == series and taken == []


def test_a_base_of_the_per_ratio_shape_takes_the_cut_in_the_fixs_place(tmp_path):
    series = load()
    tree = _tree(tmp_path, "class CompressedGather:\n    dequantized_source = None\n")
    chosen, taken = cuts.for_tree(series, tree)
    assert [cut.folder for cut, _ in taken] == ["cuts/per-ratio-workspace/patches"]
    assert chosen.names == (*CUT_NAMES, *series.names[2:])
    assert [f.number for f in chosen.fixes] == [f.number for f in series.fixes]
    paths = chosen.paths()
    assert paths[0] == CUT_DIR / "patches" / CUT_NAMES[0] and paths[2] == series.paths()[2]
    cpu = "test/registered/unit/layers/attention/test_dsv4_per_ratio_workspace_release_order.py"
    assert cuts.project_copy(chosen, cpu) == CUT_DIR / cpu
    fused = "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py"
    assert cuts.project_copy(chosen, fused) == PATCHES_DIR.parent / fused
    alone = cuts.only(chosen, chosen.fix("0001"))
    assert alone.paths() == paths[:2]
    # an installed package lacks python/sglang/
    package = _tree(tmp_path / "pkg", "dequantized_source")
    (package / "sglang").mkdir()
    shutil.move(package / "python/sglang/srt", package / "sglang/srt")
    assert cuts.for_tree(series, package / "sglang", "python/sglang/")[0].names[:2] == CUT_NAMES


def test_a_cut_must_hold_one_fix_of_the_number_it_stands_in_for(tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    series_file = patches / "cuts/per-ratio-workspace/patches/series"
    series_file.write_text(series_file.read_text().replace("0001-", "0003-", 1))
    (patches / "cuts/per-ratio-workspace/patches" / CUT_NAMES[0]).rename(
        patches / "cuts/per-ratio-workspace/patches" / CUT_NAMES[0].replace("0001-", "0003-")
    )
    tree = _tree(tmp_path / "tree", "dequantized_source")
    with pytest.raises(SeriesError) as raised:
        cuts.for_tree(load(patches), tree)
    assert "must hold one fix, 0001; it holds 0003" in str(raised.value)


def test_describe_for_a_checkout_of_the_per_ratio_shape_lists_the_cut(capsys, tmp_path):
    from tools.series import gitcmd
    from tools.series.__main__ import main

    tree = _tree(tmp_path, "dequantized_source\n")
    gitcmd.run(["init", "-q"], tree)
    assert main(["describe", "--checkout", str(tree)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["patches"][:2] == list(CUT_NAMES)
    assert described["fixes"][0]["patches"] == list(CUT_NAMES)
    assert main(["describe"]) == 0
    assert json.loads(capsys.readouterr().out)["patches"] == list(load().names)
