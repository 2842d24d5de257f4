"""Fixtures of the patch-series tests: the release base, pristine or patched, a project copy."""

import shutil

import pytest


@pytest.fixture(scope="session")
def series():
    from tools.series import seriesdir

    return seriesdir.load()


def checkout(series, dest):
    """The base as a git checkout whose work tree holds only the files the series touches."""
    from tools.series import base

    return base.materialize(series.base.version, dest, only=series.touched_files())


@pytest.fixture(scope="session")
def patched_tree(series, tmp_path_factory):
    from ci import gitcmd
    from tools.series import check

    repo = checkout(series, tmp_path_factory.mktemp("patched") / "sglang")
    check.am_series(series, repo, env=gitcmd.TOOL_IDENTITY)
    return repo


@pytest.fixture
def project(series, tmp_path):
    """patches/ and the registered tests the series adds, laid out as in the repository."""
    from tools.series.seriesdir import PATCHES_DIR, REPO_ROOT

    root = tmp_path / "project"
    shutil.copytree(PATCHES_DIR, root / "patches")
    for path, added in series.touched_files().items():
        if added and path.startswith("test/registered/"):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / path, root / path)
    return root
