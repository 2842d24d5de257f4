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


def checkout(series, dest):
    """The release base as a git checkout whose work tree holds only the files the series
    touches: its index and history are whole, so git status, am, commit and format-patch (and
    the tools that run them) see what they see in a full checkout, without writing the rest."""
    from tools.series import base

    return base.materialize(series.base.version, dest, only=series.touched_files())


@pytest.fixture(scope="session")
def patched_tree(series, tmp_path_factory):
    from ci import gitcmd
    from tools.series import check

    repo = checkout(series, tmp_path_factory.mktemp("patched") / "sglang")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    return repo
