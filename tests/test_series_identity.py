"""The series' identity: what ties a ci results folder to the series and each fix it was made for."""

import shutil

import pytest

from ci.errors import CiError
from ci.runner import run
from tools.series import seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import PATCHES_DIR

# (file, bytes replaced, replacement) -> whether the ids of the series, fix 0001, fix 0003 change
EDITS = {
    "message": (("0001-*.patch", b"Motivation", b"Why"), (False, False, False)),
    "cover-letter": (("0000-*.patch", b"Releases:", b"Versions:"), (False, False, False)),
    "code-of-0001": (("0001-*.patch", b"+            self._buffer = None", b"+            self._buffer = 0"),
                     (True, True, False)),
    "code-of-0003": (("0003-*.patch", b"+        self._k_workspace = None", b"+        self._k = None"),
                     (True, False, True)),
}  # fmt: skip


@pytest.mark.parametrize("case", EDITS)
def test_the_ids_change_with_the_code_only(tmp_path, case):
    (name, old, new), changes = EDITS[case]
    patches = shutil.copytree(PATCHES_DIR, tmp_path / "patches")
    before = seriesdir.load(patches)
    path = next(patches.glob(name))
    assert old in path.read_bytes()
    path.write_bytes(path.read_bytes().replace(old, new, 1))
    after = seriesdir.load(patches)
    ids = [(s.id, s.fix("0001").id, s.fix("0003").id) for s in (before, after)]
    assert tuple(a != b for a, b in zip(*ids, strict=True)) == changes


def test_the_base_release_is_part_of_the_id():
    datas = [patch.data for patch in seriesdir.load().patches]
    assert seriesdir.series_id("0.5.22", datas) != seriesdir.series_id("0.5.23", datas)


def test_a_ci_run_records_the_series_id_it_was_made_with(tmp_path, capsys):
    assert main(["describe"]) == 0
    described = tmp_path / "series.json"
    described.write_text(capsys.readouterr().out)
    recorded, series = run._series(str(described)), seriesdir.load()
    assert (recorded.id, recorded.release, recorded.patches) == (series.id, "0.5.23", series.names)
    assert [(f.id, f.patches) for f in recorded.fixes] == [(f.id, f.names) for f in series.fixes]
    assert run._series(None) is None  # a run without --series (an upstream checkout) has none


@pytest.mark.parametrize(
    "text, said",
    [("{", "not JSON"), ("[]", "expected an object"), ('{"id": "%s"}' % ("0" * 64), "missing field 'release'"),
     (None, "No such file")],
)  # fmt: skip
def test_a_series_file_that_describe_did_not_write_is_one_line(tmp_path, text, said):
    path = tmp_path / "series.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(CiError, match=said):
        run._series(str(path))
