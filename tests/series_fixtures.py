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


@pytest.fixture(scope="session")
def drifted_main(series, tmp_path_factory):
    """A git checkout standing for a drifted upstream main: the 0.5.23 tree with upstream's
    ``sparse_prefill_utils.py`` at 02e8ed1b (tests/fixtures/upstream_main/README.md) in place
    of 0.5.23's, committed on top of the base; built once per session."""
    from pathlib import Path

    from tools.series import base, gitcmd

    repo = base.materialize(series.base.version, tmp_path_factory.mktemp("drifted") / "sglang")
    source = Path(__file__).parent / DRIFTED_SOURCE
    (repo / DRIFTED_FILE).write_bytes(source.read_bytes())
    identity = {**gitcmd.TOOL_IDENTITY, "GIT_AUTHOR_NAME": "upstream main stand-in"}
    identity["GIT_AUTHOR_EMAIL"] = "main@sglang-overlay.invalid"
    gitcmd.run(
        ["commit", "-q", "--no-verify", "-am", "main at 02e8ed1b (DSV4 file)"], repo, identity
    )
    return repo
