"""The series' identity: what ties a ci results folder to the series it was made for."""

import shutil

import pytest

from ci.runner import RequestError, run
from tools.series import seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import PATCHES_DIR


def _copy(tmp_path):
    shutil.copytree(PATCHES_DIR, tmp_path / "patches")
    return tmp_path / "patches"


def test_rewording_a_message_or_the_cover_letter_keeps_the_id(tmp_path):
    patches = _copy(tmp_path)
    before = seriesdir.load(patches).id
    fix = next(patches.glob("0001-*.patch"))
    fix.write_bytes(fix.read_bytes().replace(b"Motivation", b"Why", 1))
    cover = patches / "0000-cover-letter.patch"
    cover.write_bytes(cover.read_bytes().replace(b"Releases:", b"Versions:", 1))
    assert seriesdir.load(patches).id == before


def test_changing_a_line_of_code_or_the_base_release_changes_the_id(tmp_path):
    patches = _copy(tmp_path)
    series = seriesdir.load(patches)
    before = series.id
    fix = next(patches.glob("0001-*.patch"))
    fix.write_bytes(
        fix.read_bytes().replace(
            b"+            self._buffer = None", b"+            self._buffer = 0", 1
        )
    )
    assert seriesdir.load(patches).id != before
    datas = [p.read_bytes() for p in series.paths()]
    assert seriesdir.series_id("0.5.22", datas) != seriesdir.series_id("0.5.23", datas)


def test_changing_one_fix_changes_its_id_and_the_series_but_not_the_other_fixs(tmp_path):
    patches = _copy(tmp_path)
    before = seriesdir.load(patches)
    fused = next(patches.glob("0003-*.patch"))
    fused.write_bytes(
        fused.read_bytes().replace(b"+        self._k_workspace = None", b"+        self._k = None")
    )
    after = seriesdir.load(patches)
    assert after.id != before.id
    assert after.fix("0001").id == before.fix("0001").id
    assert after.fix("0003").id != before.fix("0003").id


def test_a_ci_run_records_the_series_id_it_was_made_with(tmp_path, capsys):
    patches = _copy(tmp_path)
    assert main(["--patches", str(patches), "describe"]) == 0
    described = tmp_path / "series.json"
    described.write_text(capsys.readouterr().out)
    recorded = run._series(str(described))
    series = seriesdir.load(patches)
    assert recorded.id == series.id
    assert recorded.release == "0.5.23" and len(recorded.patches) == 12
    assert [(f.id, f.patches) for f in recorded.fixes] == [(f.id, f.names) for f in series.fixes]
    assert run._series(None) is None  # a run without --series (an upstream checkout) has none


@pytest.mark.parametrize(
    "text, said",
    [("{", "not JSON"), ("[]", "expected an object"), ('{"id": "x"}', "missing field 'release'")],
)
def test_a_series_file_that_describe_did_not_write_is_one_line(tmp_path, text, said):
    path = tmp_path / "series.json"
    path.write_text(text)
    with pytest.raises(RequestError, match=said):
        run._series(str(path))
    with pytest.raises(RequestError, match="No such file"):
        run._series(str(tmp_path / "absent.json"))
