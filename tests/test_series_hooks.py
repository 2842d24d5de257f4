"""Upstream's pinned hooks in ``python -m tools.series check``: black 24.10.0 at 88, isort 5.13.2,
codespell 2.4.1 with upstream's ignore list, and the basic pre-commit-hooks checks.

The hooks are the real tools, run by pre-commit from the series cache (``tools.series.check``); a
failure counts against the series only where the series brought it in.
"""

import pytest

from tools.series import check
from tools.series.seriesdir import REPO_ROOT

TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
MODULE = "python/sglang/srt/example.py"
LONG = "x = " + " + ".join(["1"] * 40) + "\n"  # one line past 88 columns


@pytest.fixture(scope="module")
def hook_env():
    return check.ensure_env()


def test_the_projects_registered_test_passes_every_upstream_hook(hook_env):
    report, failures = check.check_files({TEST: (REPO_ROOT / TEST).read_bytes()}, {TEST: None})
    assert failures == []
    assert any(line.startswith("upstream hook black 24.10.0: ok") for line in report)


def test_a_line_over_88_columns_the_series_adds_fails_black(hook_env):
    base = b'"""Module."""\n\ny = 1\n'
    _, failures = check.check_files({MODULE: base + LONG.encode()}, {MODULE: base})
    assert len(failures) == 1 and failures[0].startswith(f"black 24.10.0 fails on {MODULE}")


def test_a_black_failure_the_base_already_has_is_upstreams_not_the_series(hook_env):
    base = b'"""Module."""\n\n' + LONG.encode()
    patched = base + b"y = 1\n"
    report, failures = check.check_files({MODULE: patched}, {MODULE: base})
    assert failures == []
    assert any("fails as the base release has it" in line for line in report)


def test_codespell_uses_upstreams_ignore_list(hook_env):
    ignored = b'"""Module."""\n\n# ans als childs te\n'
    _, failures = check.check_files({MODULE: ignored}, {MODULE: None})
    assert failures == []
    _, failures = check.check_files({MODULE: ignored + b"# teh\n"}, {MODULE: None})
    assert [f.split(":")[0] for f in failures] == [f"codespell 2.4.1 fails on {MODULE}"]


def test_isort_treats_sglang_as_first_party(hook_env):
    good = b"import os\n\nimport torch\n\nfrom sglang.srt import utils\n"
    bad = b"import os\n\nimport torch\nfrom sglang.srt import utils\n"
    assert check.check_files({MODULE: good}, {MODULE: None})[1] == []
    (failure,) = check.check_files({MODULE: bad}, {MODULE: None})[1]
    assert failure.startswith(f"isort 5.13.2 fails on {MODULE}")


def test_trailing_whitespace_is_caught_without_editing_anything(hook_env):
    notes = "python/sglang/srt/NOTES.md"
    data = b"A note.   \n"
    _, failures = check.check_files({notes: data}, {notes: None})
    assert [f.split(" fails")[0] for f in failures] == ["trailing-whitespace"]


def test_problem_lines_drop_positions_and_diff_context():
    out = "--- a\n+++ b\n@@ -1 +1 @@\n context\n-old\n+new\nf.py:12:3: word ==> fix\n"
    assert check.problem_lines(out) == {"-old", "+new", "f.py: word ==> fix"}
    assert check.introduced("f.py:1: a ==> b\n", "f.py:9: a ==> b\nf.py:10: c ==> d\n") == [
        "f.py: c ==> d"
    ]
