"""Upstream's pinned hooks in ``python -m tools.series check`` (``tools.series.hooks``)."""

import pytest

from tools.series import SeriesError, hooks
from tools.series.seriesdir import REPO_ROOT

TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
MODULE = "python/sglang/srt/example.py"
NOTES = "python/sglang/srt/NOTES.md"
DOC = b'"""Module."""\n\n'
LONG = b"x = " + b" + ".join([b"1"] * 40) + b"\n"  # one line past 88 columns
IGNORED = DOC + b"# ans als childs te\n"  # words on upstream's codespell list
IMPORTS = b"import os\n\nimport torch\n\nfrom sglang.srt import utils\n"

# path -> (bytes after the series, bytes on the base or None) -> the hooks that fail.
CASES = {
    "projects-registered-test": ({TEST: (REPO_ROOT / TEST).read_bytes()}, {TEST: None}, []),
    "long-line-added": ({MODULE: DOC + b"y = 1\n" + LONG}, {MODULE: DOC + b"y = 1\n"}, ["black 24.10.0"]),
    "long-line-the-base-had": ({MODULE: DOC + LONG + b"y = 1\n"}, {MODULE: DOC + LONG}, []),
    "codespell-ignore-list": ({MODULE: IGNORED}, {MODULE: None}, []),
    "codespell-typo": ({MODULE: IGNORED + b"# teh\n"}, {MODULE: None}, ["codespell 2.4.1"]),
    "isort-first-party": ({MODULE: IMPORTS}, {MODULE: None}, []),
    "isort-merged-sections": ({MODULE: IMPORTS.replace(b"torch\n\nfrom", b"torch\nfrom")},
                              {MODULE: None}, ["isort 5.13.2"]),
    "trailing-whitespace": ({NOTES: b"A note.   \n"}, {NOTES: None}, ["trailing-whitespace"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def hook_env():
    return hooks.ensure_env()


@pytest.mark.parametrize("case", CASES)
def test_a_hook_fails_the_series_only_for_what_it_brings_in(hook_env, case):
    patched, before, failing = CASES[case]
    report, failures = hooks.check_files(patched, before)
    assert [f.split(" fails on ")[0] for f in failures] == failing, failures
    if case == "long-line-the-base-had":
        assert any("fails as the base release has it" in line for line in report)


def test_problem_lines_drop_positions_and_diff_context():
    out = "--- a\n+++ b\n@@ -1 +1 @@\n context\n-old\n+new\nf.py:12:3: word ==> fix\n"
    assert hooks.problem_lines(out) == {"-old", "+new", "f.py: word ==> fix"}
    moved, added = hooks.problem_lines("f.py:9: a ==> b\nf.py:10: c ==> d\n"), {"f.py: c ==> d"}
    assert moved - hooks.problem_lines("f.py:1: a ==> b\n") == added


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
def test_the_hooks_are_kept_per_user_unless_one_cache_folder_is_named(
    monkeypatch, variables, expected
):
    for name in ("XDG_CACHE_HOME", "SGLANG_SERIES_CACHE", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert str(hooks._hooks_cache_dir()) == expected


def test_a_hooks_folder_that_cannot_be_written_is_one_line_and_exit_2(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(hooks, "HOOKS_CACHE_DIR", tmp_path / "file" / "below")
    with pytest.raises(SeriesError) as raised:
        hooks.ensure_env()
    said = str(raised.value)
    assert raised.value.exit_code == 2 and len(said.splitlines()) == 1, said
    assert said.startswith(f"cannot write upstream's hooks into {tmp_path}/file/below/")
    assert "Not a directory; set XDG_CACHE_HOME or SGLANG_SERIES_CACHE" in said
