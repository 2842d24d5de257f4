"""A cached local git repository in sglang's layout: main, ``fix`` and ``tests-only``."""

import hashlib
import shutil
from pathlib import Path

from ci_samples import REGISTERED, registered
from conftest import REPO

ADDED = "test/registered/unit/layers/test_release_first_source.py"
MODIFIED = "test/registered/unit/test_layout_modified.py"
UNCHANGED = "test/registered/unit/test_layout_unchanged.py"
CUDA_TEST = "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
CPU_COMPANION = "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
SOURCE_TEST = REPO / "tests/fixtures/upstream_style/test_release_first_source.py"
IDENTITY = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER")
            for key, value in (("NAME", "contributor"), ("EMAIL", "contributor@example.invalid"))}  # fmt: skip

# kept besides what the DSV4 patches touch: the registry reader ``ci.runner.collect`` loads
SLIM = ("python/sglang/test/ci/ci_register.py",)


def _git(repo: Path, *args: str) -> str:
    from ci import gitcmd

    return gitcmd.out(list(args), repo, env=IDENTITY)


def _write(repo: Path, path: str, text: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)


def checkout(tmp_path_factory) -> Path:
    """A fixture's body: a copy of the cached repository, on branch ``main``."""
    dest = tmp_path_factory.mktemp("layout") / "sglang"
    shutil.copytree(_cached(), dest, symlinks=True)
    return dest


def _patches():
    from tools.series import seriesdir

    series = seriesdir.load()
    fix, cuda_test = (series.root / name for name in series.fix("0001").names)  # the DSV4 fix
    return series, fix, cuda_test


def _cached() -> Path:
    from tools.series import base

    series, fix, cuda_test = _patches()
    digest = hashlib.sha256((series.base.version + REGISTERED).encode())
    for path in (Path(__file__), SOURCE_TEST, fix, cuda_test):
        digest.update(path.read_bytes())
    cache = base.CACHE_DIR / "layouts" / digest.hexdigest()[:16]
    return base.built_once(cache, lambda repo: _build(repo, series, fix, cuda_test))


def _touched(patch: Path) -> list:
    lines = patch.read_text().splitlines()
    return [line.split(" b/", 1)[1] for line in lines if line.startswith("diff --git a/")]


def _build(repo: Path, series, fix: Path, cuda_test: Path) -> None:
    from tools.series import base

    release = base.cached_base(series.base.version)
    _git(repo, "init", "-q", "-b", "main")
    for path in sorted({*SLIM, *_touched(fix), *_touched(cuda_test)}):
        data = base.blob(release, path)
        if data is not None:  # a file the patches add is not in the release
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_bytes(data)
    _git(repo, "add", "-A", "-f")
    _git(repo, "commit", "-q", "-m", f"sglang {series.base.version} (the files the layout needs)")
    _git(repo, "tag", base.BASE_TAG)
    _write(repo, UNCHANGED, registered("unchanged", est=3, cls="TestLayout"))
    _write(repo, MODIFIED, registered("modified", est=2, cls="TestLayout"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "registered CPU tests")
    for branch, patches in (("fix", (fix, cuda_test)), ("tests-only", (cuda_test,))):
        _git(repo, "checkout", "-q", "-b", branch, "main")
        _git(repo, "am", "-q", "--no-3way", *map(str, patches))
        _git(repo, "rm", "-q", CPU_COMPANION)
        (repo / ADDED).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE_TEST, repo / ADDED)
        _write(repo, MODIFIED, registered("modified", est=2, cls="TestLayout", body="assert 2"))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"{branch}: upstream-style tests")
    _git(repo, "checkout", "-q", "main")
