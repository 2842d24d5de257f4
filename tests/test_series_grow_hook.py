"""The grow-while-held pre-commit hook (``tools/series/grow_hook.py``, ``.pre-commit-hooks.yaml``):
a new site in a changed file fails, a site the base already had passes, a marker with a reason
passes and one without fails. The end-to-end tests run the real pre-commit 4.7 on a scratch git
repository that uses a scratch copy of this project as its hook repository (``language: script``,
nothing installed, nothing fetched).
"""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.series.seriesdir import REPO_ROOT

HOOK_FILES = (
    ".pre-commit-hooks.yaml",
    "ci/__init__.py",
    "ci/gitcmd.py",
    "tools/__init__.py",
    "tools/series/__init__.py",
    "tools/series/audit.py",
    "tools/series/audit_class.py",
    "tools/series/audit_expr.py",
    "tools/series/audit_marks.py",
    "tools/series/audit_read.py",
    "ci/errors.py",
    "tools/series/grow_hook.py",
)
OLD = """\
import torch


class Workspace:
    def get(self, num_tokens):
        self.buf = torch.empty(num_tokens)
        return self.buf
"""
NEW_METHOD = """
    def grow_kv(self, capacity):
        self.kv = torch.zeros(capacity, 512)
"""
MARKED = """
    def grow_kv(self, capacity):
        # grows-while-held: keeps-old-on-purpose a captured CUDA graph still reads the old one
        self.kv = torch.zeros(capacity, 512)
"""
RELEASED = """
    def grow_kv(self, capacity):
        self.kv = None
        self.kv = torch.zeros(capacity, 512)
"""
BARE_MARKER = """
    def grow_kv(self, capacity):
        self.kv = torch.zeros(capacity, 512)  # grows-while-held: keeps-old-on-purpose
"""


def _env(tmp_path: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    keep.pop("SKIP", None)
    return {**keep, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}


def _git(repo: Path, *args, env=None) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def _repo(path: Path, files: "dict[str, str]", env) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q", env=env)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A", env=env)
    _git(path, "commit", "-qm", "base", env=env)
    return path


def _hook(repo: Path, *files) -> "tuple[int, str]":
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools/series/grow_hook.py"), *files],
        cwd=repo,
        capture_output=True,
        text=True,
        env=_env(repo.parent),
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def consumer(tmp_path):
    return _repo(tmp_path / "consumer", {"ws.py": OLD}, _env(tmp_path))


def test_a_new_site_in_a_changed_file_fails_and_names_it(consumer):
    (consumer / "ws.py").write_text(OLD + NEW_METHOD)
    code, out = _hook(consumer, "ws.py")
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("ws.py:10: Workspace.grow_kv allocates the new self.kv while still")
    assert "grows with capacity" in line and "keeps-old-on-purpose <reason>" in line


def test_a_site_the_base_already_had_passes(consumer):
    (consumer / "ws.py").write_text(OLD.replace("return self.buf", "return self.buf[:1]"))
    assert _hook(consumer, "ws.py") == (0, "")


def test_a_new_file_counts_every_site_as_new(consumer):
    (consumer / "fresh.py").write_text(OLD)
    code, out = _hook(consumer, "fresh.py")
    assert code == 1 and out.startswith("fresh.py:6: Workspace.get allocates the new self.buf")


@pytest.mark.parametrize("method", [MARKED, RELEASED])
def test_a_marked_or_released_site_passes(consumer, method):
    (consumer / "ws.py").write_text(OLD + method)
    assert _hook(consumer, "ws.py") == (0, "")


def test_a_marker_without_a_reason_fails(consumer):
    (consumer / "ws.py").write_text(OLD + BARE_MARKER)
    code, out = _hook(consumer, "ws.py")
    assert code == 1
    assert "ws.py:10: a keeps-old-on-purpose marker must say why" in out.splitlines()


# -- the real pre-commit, with this project as the hook repository -------------------------------


@pytest.fixture
def adopted(tmp_path):
    """A scratch sglang-like repository whose .pre-commit-config.yaml uses the hook as sglang
    would: this project's hook repository at a revision, the hook by its id."""
    env = _env(tmp_path)
    hooks = _repo(tmp_path / "hook-repo", {f: (REPO_ROOT / f).read_text() for f in HOOK_FILES}, env)
    shutil.copymode(REPO_ROOT / "tools/series/grow_hook.py", hooks / "tools/series/grow_hook.py")
    _git(hooks, "add", "-A", env=env)
    _git(hooks, "commit", "-qm", "executable hook", "--allow-empty", env=env)
    rev = _git(hooks, "rev-parse", "HEAD", env=env).strip()
    config = textwrap.dedent(
        f"""\
        repos:
          - repo: {hooks}
            rev: {rev}
            hooks:
              - id: grows-while-held
                files: ^python/sglang/
        """
    )
    repo = _repo(
        tmp_path / "sglang",
        {".pre-commit-config.yaml": config, "python/sglang/srt/ws.py": OLD, "docs/old.py": ""},
        env,
    )
    return repo, env


def _pre_commit(repo: Path, env: dict) -> "tuple[int, str]":
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_pre_commit_refuses_a_staged_new_site_and_passes_it_once_marked(adopted):
    repo, env = adopted
    module = repo / "python/sglang/srt/ws.py"
    module.write_text(OLD + NEW_METHOD)
    (repo / "docs/old.py").write_text(OLD)  # outside files: not checked
    _git(repo, "add", "-A", env=env)
    code, out = _pre_commit(repo, env)
    assert code == 1, out
    assert "python/sglang/srt/ws.py:10: Workspace.grow_kv allocates the new self.kv" in out
    assert "docs/old.py" not in out and "Workspace.get" not in out
    module.write_text(OLD + MARKED)
    _git(repo, "add", "-A", env=env)
    code, out = _pre_commit(repo, env)
    assert code == 0, out
    assert "no new grows-while-held allocation" in out and "Passed" in out


def test_pre_commit_runs_the_vendored_hook_as_a_local_system_hook(tmp_path):
    env = _env(tmp_path)
    vendored = {f"scripts/{f}": (REPO_ROOT / f).read_text() for f in HOOK_FILES[1:]}
    config = textwrap.dedent(
        f"""\
        repos:
          - repo: local
            hooks:
              - id: grows-while-held
                name: no new grows-while-held allocation
                entry: {sys.executable} scripts/tools/series/grow_hook.py
                language: system
                types: [python]
                files: ^python/sglang/
        """
    )
    files = {".pre-commit-config.yaml": config, "python/sglang/srt/ws.py": OLD, **vendored}
    repo = _repo(tmp_path / "sglang", files, env)
    (repo / "python/sglang/srt/ws.py").write_text(OLD + NEW_METHOD)
    _git(repo, "add", "-A", env=env)
    code, out = _pre_commit(repo, env)
    assert code == 1, out
    assert "python/sglang/srt/ws.py:10: Workspace.grow_kv allocates the new self.kv" in out


def test_pre_commit_try_repo_refuses_sites_marked_only_in_a_string_or_the_line_before(adopted):
    """Issue 34 break 5: try-repo passed two unmarked new sites (a marker in a docstring, and a
    trailing marker on the statement before); each is a new site now."""
    repo, env = adopted
    hooks = repo.parent / "hook-repo"
    module = repo / "python/sglang/srt/ws.py"
    module.write_text(
        OLD
        + '\n    def grow_kv(self, capacity):\n        """# grows-while-held: keeps-old-on-purpose'
        ' doc"""\n        self.kv = torch.zeros(capacity, 512)\n' + "\n    def grow_q(self, n):\n"
        "        self.a = torch.zeros(n)  # grows-while-held: keeps-old-on-purpose graph reads it\n"
        "        self.q = torch.zeros(n)\n"
    )
    _git(repo, "add", "-A", env=env)
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hooks), "grows-while-held"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "ws.py:11: Workspace.grow_kv allocates the new self.kv" in out
    assert "ws.py:15: Workspace.grow_q allocates the new self.q" in out
    assert "self.a " not in out
