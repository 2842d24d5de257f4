"""A local git repository in sglang's own layout, for the tests of ``ci run --git-base/--git-head``
and of the drop-in workflow: sglang 0.5.23 from PyPI (``tools.series.base``), a ``main`` that adds
upstream-style registered CPU tests, and two pull-request branches off it:

- ``fix``: patch 0001 (the fix) and 0002 (its tests) by ``git am``, less 0002's CPU companion
  (it imports sglang: seconds per process), a CPU test that reads the workspace's release order
  from the tree's own source (added), and a modified existing test;
- ``tests-only``: the same tests, without the fix.

The CPU tests read sglang's source and import no sglang, so each of their processes is cheap.
"""

import shutil
from pathlib import Path

from conftest import REPO

ADDED = "test/registered/unit/layers/test_release_first_source.py"
MODIFIED = "test/registered/unit/test_layout_modified.py"
UNCHANGED = "test/registered/unit/test_layout_unchanged.py"
CUDA_TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
CPU_COMPANION = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
SOURCE_TEST = REPO / "tests/fixtures/upstream_style/test_release_first_source.py"
IDENTITY = {
    "GIT_AUTHOR_NAME": "contributor",
    "GIT_AUTHOR_EMAIL": "contributor@example.invalid",
    "GIT_COMMITTER_NAME": "contributor",
    "GIT_COMMITTER_EMAIL": "contributor@example.invalid",
}

# A registered test that imports nothing of sglang and passes on any tree.
PASSING = """import unittest


def register_cpu_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time={est}, suite="base-a-test-cpu")


class TestLayout(unittest.TestCase):
    def test_{name}(self):
        self.assertTrue(True)


if __name__ == "__main__":
    unittest.main()
"""


def _git(repo: Path, *args: str) -> str:
    from tools.series import gitcmd

    return gitcmd.out(list(args), repo, env=IDENTITY)


def _write(repo: Path, path: str, text: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)


def make_repo(dest: Path) -> Path:
    """The repository at ``dest``, on branch ``main``; branches ``fix`` and ``tests-only``."""
    from tools.series import base, seriesdir

    series = seriesdir.load()
    repo = base.materialize(series.base.version, dest)
    _write(repo, UNCHANGED, PASSING.format(est=3, name="unchanged"))
    _write(repo, MODIFIED, PASSING.format(est=2, name="modified"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "registered CPU tests")
    fix, cuda_test = (series.root / name for name in series.fix("0001").names)  # the DSV4 fix
    for branch, patches in (("fix", (fix, cuda_test)), ("tests-only", (cuda_test,))):
        _git(repo, "checkout", "-q", "-b", branch, "main")
        _git(repo, "am", "-q", "--no-3way", *map(str, patches))
        _git(repo, "rm", "-q", CPU_COMPANION)
        (repo / ADDED).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE_TEST, repo / ADDED)
        text = PASSING.format(est=2, name="modified").replace("(True)", "(1 + 1 == 2)")
        _write(repo, MODIFIED, text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"{branch}: upstream-style tests")
    _git(repo, "checkout", "-q", "main")
    return repo
