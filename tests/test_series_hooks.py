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


@pytest.mark.parametrize("case", CASES)
def test_a_hook_fails_the_series_only_for_what_it_brings_in(case):
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


def test_hooks_pre_commit_cannot_install_are_exit_2_not_a_traceback(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PRE_COMMIT_HOME", str(tmp_path / "file" / "store"))
    with pytest.raises(SeriesError, match="could not install or run upstream's hooks") as raised:
        hooks.check_files({MODULE: str(tmp_path).encode()}, {MODULE: None})  # never cached
    assert raised.value.code == 2 and len(str(raised.value).splitlines()) == 1
