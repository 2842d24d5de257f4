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
