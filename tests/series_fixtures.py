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
    the tools that run them) see what they see in a full checkout. Where a test's subject is not
    the rest of the tree: writing the release's 5,800 files costs 2.4-4.5 CPU-s on a 2-core VM
    (most of it the kernel's), this 0.05 s."""
    from tools.series import base

    return base.materialize(series.base.version, dest, only=series.touched_files())


@pytest.fixture(scope="session")
def patched_tree(series, tmp_path_factory):
    from ci import gitcmd
    from tools.series import check

    repo = checkout(series, tmp_path_factory.mktemp("patched") / "sglang")
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
    from ci import gitcmd

    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    identity = {**gitcmd.TOOL_IDENTITY, "GIT_AUTHOR_NAME": "upstream main stand-in"}
    identity["GIT_AUTHOR_EMAIL"] = "main@sglang-overlay.invalid"
    gitcmd.run(["add", "-f", *files], repo)
    gitcmd.run(["commit", "-q", "--no-verify", "-m", message], repo, identity)
    return gitcmd.out(["rev-parse", "HEAD"], repo)


# What a check of a checkout imports from its tree: its own collector (test/run_suite.py) starts
# with ``from sglang.test.ci.ci_register import ...``, which runs sglang/__init__.py.
_COLLECTOR_IMPORTS = """
import json, os, sys
tree = sys.argv[1]
sys.path[:0] = [tree]
import sglang.test.ci.ci_register
files = {getattr(m, "__file__", None) or "" for m in list(sys.modules.values())}
print(json.dumps(sorted(os.path.relpath(f, tree) for f in files if f.startswith(tree + os.sep))))
"""


def _slim_release(series, repo):
    """A new repository at ``repo`` whose one commit holds the release's files that the series
    and a check of main read: the files the series touches and what the collector's import
    loads from the tree (found by importing it from the cached release), byte for byte. Not the
    other 5,700: every check of a checkout writes its whole tree, 2.4-4.5 CPU-s each on a 2-core
    VM, and nothing the checks do reads them."""
    import json
    import subprocess
    import sys

    from ci import gitcmd
    from tools.series import base

    release = base.cached_base(series.base.version)
    proc = subprocess.run(
        [sys.executable, "-c", _COLLECTOR_IMPORTS, str(release / "python")],
        capture_output=True, text=True, timeout=300, cwd="/", check=True,
    )  # fmt: skip
    imported = ["python/" + path for path in json.loads(proc.stdout)]
    assert "python/sglang/test/ci/ci_register.py" in imported, proc.stdout
    blobs = {p: base.blob(release, p) for p in sorted({*series.touched_files(), *imported})}
    gitcmd.run(["init", "-q", str(repo)], repo.parent)
    files = {path: data for path, data in blobs.items() if data is not None}  # not the new ones
    return commit_files(repo, files, f"sglang {series.base.version}: the files main's checks read")


@pytest.fixture(scope="session")
def drifted_main(series, tmp_path_factory):
    """A git checkout standing for a drifted upstream main, built once per session: at
    ``HEAD~2`` sglang 0.5.23's files that the series and the checks read (``_slim_release``);
    at ``HEAD~1`` main's own tooling, a ``.pre-commit-config.yaml`` (``OWN_HOOKS``) and a
    ``test/run_suite.py`` (a stand-in, tests/fixtures/upstream_main/README.md), so that a check
    of ``HEAD~1``, where the series applies, runs them; at ``HEAD`` upstream's
    ``sparse_prefill_utils.py`` at 02e8ed1b (tests/fixtures/upstream_main/README.md) in place
    of 0.5.23's."""
    from pathlib import Path

    repo = tmp_path_factory.mktemp("drifted") / "sglang"
    repo.mkdir()
    _slim_release(series, repo)
    here = Path(__file__).parent
    tooling = {".pre-commit-config.yaml": OWN_HOOKS.encode()}
    tooling["test/run_suite.py"] = (here / RUN_SUITE_SOURCE).read_bytes()
    commit_files(repo, tooling, "main's own hooks and test runner")
    source = here / DRIFTED_SOURCE
    commit_files(repo, {DRIFTED_FILE: source.read_bytes()}, "main at 02e8ed1b (DSV4 file)")
    return repo
