"""Session fixtures for the patch-series tests (tests/test_series*.py), imported by name.

The materialised release is built once per checkout under .cache/ (tools.series.base); these
fixtures clone it: one pristine tree, one with the series applied by git am. Kept out of
conftest.py so the series tests stay self-contained.
"""

import pytest


@pytest.fixture(scope="session")
def series():
    from tools.series import seriesdir

    return seriesdir.load()


@pytest.fixture(scope="session")
def pristine_tree(series, tmp_path_factory):
    from tools.series import base

    return base.materialize(series.base.version, tmp_path_factory.mktemp("pristine") / "sglang")


@pytest.fixture(scope="session")
def patched_tree(series, tmp_path_factory):
    from tools.series import base, check, gitcmd

    repo = base.materialize(series.base.version, tmp_path_factory.mktemp("patched") / "sglang")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    return repo


DRIFTED_FILE = "python/sglang/srt/layers/attention/dsv4/sparse_prefill_utils.py"
DRIFTED_SOURCE = "fixtures/upstream_main/sparse_prefill_utils-02e8ed1b.py.txt"
RUN_SUITE_SOURCE = "fixtures/upstream_main/run_suite.py.txt"
# The rehearsal main's own hooks: local ones (language system and pygrep), so nothing is
# downloaded; the series passes them.
OWN_HOOKS = """\
repos:
  - repo: local
    hooks:
      - id: py-compile
        name: python files compile
        entry: python3 -m py_compile
        language: system
        files: \\.py$
      - id: no-conflict-markers
        name: no merge conflict markers
        entry: "^(<<<<<<<|>>>>>>>) "
        language: pygrep
"""


def commit_files(repo, files: dict, message: str) -> str:
    """Write ``files`` (path -> bytes) in ``repo`` and commit them; the new commit."""
    from tools.series import gitcmd

    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    identity = {**gitcmd.TOOL_IDENTITY, "GIT_AUTHOR_NAME": "upstream main stand-in"}
    identity["GIT_AUTHOR_EMAIL"] = "main@sglang-overlay.invalid"
    gitcmd.run(["add", "-f", *files], repo)
    gitcmd.run(["commit", "-q", "--no-verify", "-m", message], repo, identity)
    return gitcmd.out(["rev-parse", "HEAD"], repo)


@pytest.fixture(scope="session")
def drifted_main(series, tmp_path_factory):
    """A git checkout standing for a drifted upstream main: the 0.5.23 tree with upstream's
    ``sparse_prefill_utils.py`` at 02e8ed1b (tests/fixtures/upstream_main/README.md) in place
    of 0.5.23's, committed on top of the base; built once per session. Before that commit
    (``HEAD~1``) main gains its own tooling: a ``.pre-commit-config.yaml`` (``OWN_HOOKS``) and
    a ``test/run_suite.py`` (a stand-in, tests/fixtures/upstream_main/README.md), so that a
    check of ``HEAD~1``, where the series applies, runs them."""
    from pathlib import Path

    from tools.series import base

    repo = base.materialize(series.base.version, tmp_path_factory.mktemp("drifted") / "sglang")
    here = Path(__file__).parent
    tooling = {".pre-commit-config.yaml": OWN_HOOKS.encode()}
    tooling["test/run_suite.py"] = (here / RUN_SUITE_SOURCE).read_bytes()
    commit_files(repo, tooling, "main's own hooks and test runner")
    source = here / DRIFTED_SOURCE
    commit_files(repo, {DRIFTED_FILE: source.read_bytes()}, "main at 02e8ed1b (DSV4 file)")
    return repo
