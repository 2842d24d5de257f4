"""The cover letter: 0000-cover-letter.patch as git format-patch --cover-letter writes it,
kept by refresh, never listed in ``series`` and never applied by ``git am``."""

import shutil

import pytest

from ci import gitcmd
from tools.series import SeriesError, check, seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import (
    COVER_NAME,
    PATCHES_DIR,
    REPO_ROOT,
    CoverError,
    parse_cover,
    pin_date,
)

TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"

pytest_plugins = ["series_fixtures"]  # its checkout(), imported in the test that uses it


def _project_copy(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(PATCHES_DIR, root / "patches")
    (root / TEST).parent.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / TEST, root / TEST)
    return root


def test_the_cover_letter_introduces_every_patch_of_the_series():
    series = seriesdir.load()
    letter = parse_cover((PATCHES_DIR / COVER_NAME).read_bytes())
    assert series.cover == letter and letter.count == len(series.names) == 12
    assert COVER_NAME not in series.names
    text = (PATCHES_DIR / COVER_NAME).read_text()
    assert all(patch.subject.split()[1] in text for patch in series.patches)  # git's shortlog


def test_the_cover_letter_names_each_fix_and_reproduces_from_the_base():
    series = seriesdir.load()
    text = " ".join(parse_cover((PATCHES_DIR / COVER_NAME).read_bytes()).blurb.split())
    numbers = [int(fix.number) for fix in series.fixes]
    ends = [*(n - 1 for n in numbers[1:]), len(series.names)]
    for start, end in zip(numbers, ends, strict=True):
        assert f"Patches {start}-{end}," in text  # one paragraph, one pull request, per fix
    # With the whole series applied, HEAD~N is the base for every file the series changes.
    assert f"HEAD~{len(series.names)} is the base" in text
    assert f"git checkout HEAD~{len(series.names)} -- " in text
    for path in series.touched_files():
        assert path.rsplit("/", 1)[-1] in text, path


def test_the_cover_letter_quotes_the_projects_own_hazard_figures():
    import json

    h200 = json.loads((REPO_ROOT / "docs/evidence/h200-0.5.23-hazard/hazard.json").read_text())
    cpu = json.loads((REPO_ROOT / "docs/evidence/cpu-0.5.23-hazard/hazard.json").read_text())
    text = " ".join((PATCHES_DIR / COVER_NAME).read_text().split())
    for report in (h200, cpu):
        release_first = report["summary"]["release-first"]
        assert f"{release_first['same_address']} of {release_first['replacements']}" in text
    assert "generation counter" in text and "CompressedGather.dequantized_source" in text


def test_series_may_not_list_the_cover_letter():
    with pytest.raises(SeriesError, match="cover letter, not a patch"):
        seriesdir.parse_series(f"{COVER_NAME}\n0001-a.patch\n", "series")


def test_a_cover_letter_for_another_number_of_patches_is_refused(capsys, tmp_path):
    root = _project_copy(tmp_path)
    cover = root / "patches" / COVER_NAME
    cover.write_bytes(cover.read_bytes().replace(b"[PATCH 00/12]", b"[PATCH 0/3]", 1))
    assert main(["--patches", str(root / "patches"), "check"]) == 1
    assert "introduces 3 patches" in capsys.readouterr().err


def test_placeholders_and_missing_shortlog_are_corrupt_cover_letters():
    head = b"From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nDate: x\n"
    with pytest.raises(CoverError, match="placeholders"):
        parse_cover(
            head + b"Subject: [PATCH 0/1] *** SUBJECT HERE ***\n\n*** BLURB ***\n\na (1):\n"
        )
    with pytest.raises(CoverError, match="no shortlog"):
        parse_cover(head + b"Subject: [PATCH 0/1] s\n\nblurb\n")


def test_pin_date_touches_only_the_date_header():
    data = b"From 0\nDate: now\nSubject: s\n\nDate: body line\n"
    assert pin_date(data, "then") == b"From 0\nDate: then\nSubject: s\n\nDate: body line\n"


def test_refresh_rewrites_the_shortlog_and_keeps_subject_blurb_and_date(capsys, tmp_path):
    from series_fixtures import checkout  # a plugin module of the series tests

    series = seriesdir.load()
    repo = checkout(series, tmp_path / "sglang")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    gitcmd.run(
        ["commit", "-q", "--amend", "-m", "[DSV4] A new subject for the test commit"],
        repo,
        env=gitcmd.TOOL_IDENTITY,
    )
    root = _project_copy(tmp_path)
    before = (root / "patches" / COVER_NAME).read_bytes()
    assert main(["--patches", str(root / "patches"), "refresh", "--from", str(repo)]) == 0
    assert f"{COVER_NAME}: updated" in capsys.readouterr().out
    after = (root / "patches" / COVER_NAME).read_bytes()
    assert b"A new subject for the test commit" in after and after != before
    old, new = parse_cover(before), parse_cover(after)
    assert (new.subject, new.blurb, new.count) == (old.subject, old.blurb, old.count)
    date = [line for line in after.splitlines() if line.startswith(b"Date: ")][0]
    assert date in before.splitlines()  # the newest commit's date, not the time of the refresh
