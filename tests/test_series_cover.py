"""The cover letter: never in ``series``, never applied, introducing every patch."""

import json

import pytest

from tools.series import SeriesError, seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import COVER_NAME, PATCHES_DIR, REPO_ROOT, parse_cover

pytest_plugins = ["series_fixtures"]


def test_the_cover_letter_introduces_each_patch_and_fix_and_reproduces_from_the_base(series):
    letter = parse_cover((PATCHES_DIR / COVER_NAME).read_bytes())
    assert series.cover == letter and letter.count == len(series.names) == 12
    assert COVER_NAME not in series.names
    shortlog = (PATCHES_DIR / COVER_NAME).read_text().split(letter.blurb.splitlines()[-1])[1]
    assert all(patch.subject.split()[1] in shortlog for patch in series.patches)
    text = " ".join(letter.blurb.split())
    numbers = [int(fix.number) for fix in series.fixes]
    for start, end in zip(numbers, [*(n - 1 for n in numbers[1:]), 12], strict=True):
        assert f"Patches {start}-{end}," in text  # one paragraph, one pull request, per fix
    # With the whole series applied, HEAD~N is the base for every file the series changes.
    assert "HEAD~12 is the base" in text and "git checkout HEAD~12 -- " in text
    for path in series.touched_files():
        assert path.rsplit("/", 1)[-1] in text, path


def test_the_cover_letter_quotes_the_projects_own_hazard_figures():
    text = " ".join((PATCHES_DIR / COVER_NAME).read_text().split())
    for device in ("h200", "cpu"):
        hazard = REPO_ROOT / f"docs/evidence/{device}-0.5.23-hazard/hazard.json"
        release_first = json.loads(hazard.read_text())["summary"]["release-first"]
        assert f"{release_first['same_address']} of {release_first['replacements']}" in text
    assert "generation counter" in text and "CompressedGather.dequantized_source" in text


HEAD = b"From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nDate: x\n"


@pytest.mark.parametrize(
    "data, said",
    [
        (HEAD + b"Subject: [PATCH 0/1] *** SUBJECT HERE ***\n\n*** BLURB ***\n\na (1):\n", "placeholders"),
        (HEAD + b"Subject: [PATCH 0/1] s\n\nblurb\n", "no shortlog"),
        (HEAD + b"Subject: s\n\nblurb\n\na (1):\n", r"must start with '\[PATCH 0/N\]'"),
        (b"Subject: [PATCH 0/1] s\n\nblurb\n\na (1):\n", "no 'From ' line"),
    ],
)  # fmt: skip
def test_a_cover_letter_that_format_patch_did_not_write_is_corrupt(data, said):
    with pytest.raises(SeriesError, match=said):
        parse_cover(data)


def test_series_may_not_list_the_cover_letter_nor_introduce_another_count(capsys, project):
    with pytest.raises(SeriesError, match="cover letter, not a patch"):
        seriesdir.parse_series(f"{COVER_NAME}\n0001-a.patch\n", "series")
    cover = project / "patches" / COVER_NAME
    cover.write_bytes(cover.read_bytes().replace(b"[PATCH 00/12]", b"[PATCH 0/3]", 1))
    assert main(["--patches", str(project / "patches"), "check"]) == 1
    assert "introduces 3 patches" in capsys.readouterr().err
