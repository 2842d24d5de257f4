"""The grow-while-held pre-commit hook (``tools/series/grow_hook.py``)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_series_audit import UNREADABLE, _hostile_tree

from tools.series import grow_hook
from tools.series.seriesdir import REPO_ROOT

HOOK_FILES = ("ci/__init__.py", "ci/errors.py", "ci/gitcmd.py", "tools/__init__.py",
              "tools/series/__init__.py", "tools/series/audit.py", "tools/series/audit_expr.py",
              "tools/series/grow_hook.py")  # fmt: skip
OLD = """\
import torch


class Workspace:
    def get(self, num_tokens):
        self.buf = torch.empty(num_tokens)
        return self.buf
"""
KEEP = "# grows-while-held: keeps-old-on-purpose"
NEW_SITE = "\n    def grow_kv(self, capacity):\n        self.kv = torch.zeros(capacity, 512)\n"
MARKED = f"\n    def grow_kv(self, capacity):\n        {KEEP} a CUDA graph reads the old one\n"
MARKED += "        self.kv = torch.zeros(capacity, 512)\n"
NEW_LINE = "ws.py:10: Workspace.grow_kv allocates the new self.kv while still holding the old one"
BARE = "ws.py:10: a keeps-old-on-purpose marker must say why"

# (file, what it becomes) -> (exit code, the starts of the lines the hook prints).
CASES = {
    "new-site": ("ws.py", OLD + NEW_SITE, 1, (NEW_LINE,)),
    "site-the-base-had": ("ws.py", OLD.replace("return self.buf", "return self.buf[:1]"), 0, ()),
    "marked": ("ws.py", OLD + MARKED, 0, ()),
    "released": ("ws.py", OLD + NEW_SITE.replace("        self.kv = torch", "        self.kv = None\n        self.kv = torch"), 0, ()),
    "marker-without-reason": ("ws.py", OLD + NEW_SITE.replace("512)", f"512)  {KEEP}"), 1, (NEW_LINE, BARE)),
    "zero-width-reason": ("ws.py", OLD + NEW_SITE.replace("512)", f"512)  {KEEP} \u200b"), 1, (NEW_LINE, BARE)),
    "marker-in-a-docstring": ("ws.py", OLD + NEW_SITE.replace("):\n", f'):\n        """{KEEP} doc"""\n', 1),
                              1, ("ws.py:11: Workspace.grow_kv allocates the new self.kv",)),
    "marker-on-the-statement-before": ("ws.py",
        OLD + f"\n    def grow_q(self, n):\n        self.a = torch.zeros(n)  {KEEP} graph reads it\n"
        "        self.q = torch.zeros(n)\n", 1, ("ws.py:11: Workspace.grow_q allocates the new self.q",)),
    "new-file": ("fresh.py", OLD, 1, ("fresh.py:6: Workspace.get allocates the new self.buf",)),
}  # fmt: skip


def _env(tmp_path: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    return {**keep, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "SKIP": ""}


def _git(repo: Path, *args, env) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return proc.stdout.decode()


def _repo(path: Path, files: "dict[str, str]", env) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q", env=env)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A", env=env)
    _git(path, "commit", "-qm", "base", env=env)
    return path


def _hook(monkeypatch, capsys, cwd: Path, *files) -> "tuple[int, str]":
    monkeypatch.chdir(cwd)
    code = grow_hook.main(list(files))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("case", CASES)
def test_the_hook_refuses_new_sites_and_markers_that_do_not_say_why(
    tmp_path, monkeypatch, capsys, case
):
    name, text, code, lines = CASES[case]
    consumer = _repo(tmp_path / "consumer", {"ws.py": OLD}, _env(tmp_path))
    (consumer / name).write_text(text)
    got, out = _hook(monkeypatch, capsys, consumer, name)
    assert got == code and len(out.splitlines()) == len(lines), out
    assert all(x.startswith(line) for x, line in zip(out.splitlines(), lines, strict=True)), out


def test_the_hook_names_each_unreadable_file_and_goes_on(tmp_path, monkeypatch, capsys):
    srt = _hostile_tree(tmp_path)
    names = sorted(p.name for p in srt.iterdir() if p.name.endswith(".py"))
    code, out = _hook(monkeypatch, capsys, srt, *names)
    assert code == 1
    for name in UNREADABLE:
        assert f"{name}.py: cannot be checked:" in out
    assert "latin1.py:8: W.get allocates the new self.buf" in out
    assert "zz_good.py:6: W.get allocates the new self.buf" in out


def _pre_commit(repo: Path, env: dict) -> "tuple[int, str]":
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run"], cwd=repo, env=env, capture_output=True
    )
    return proc.returncode, (proc.stdout + proc.stderr).decode()


LOCAL = "  - repo: local\n    hooks:\n      - id: grows-while-held\n        language: system\n"
LOCAL += (
    f"        name: grows-while-held\n        entry: {sys.executable} scripts/{HOOK_FILES[-1]}\n"
)


@pytest.mark.parametrize("vendored", [False, True], ids=["hook-repository", "vendored"])
def test_pre_commit_refuses_a_staged_new_site_and_passes_it_once_marked(tmp_path, vendored):
    env, hook = _env(tmp_path), REPO_ROOT / "tools/series/grow_hook.py"
    files, repo_line = {f"scripts/{f}": (REPO_ROOT / f).read_text() for f in HOOK_FILES}, LOCAL
    if not vendored:
        served = {f: (REPO_ROOT / f).read_text() for f in (".pre-commit-hooks.yaml", *HOOK_FILES)}
        hooks = _repo(tmp_path / "hook-repo", served, env)
        shutil.copymode(hook, hooks / "tools/series/grow_hook.py")
        _git(hooks, "commit", "-qam", "executable hook", "--allow-empty", env=env)
        rev = _git(hooks, "rev-parse", "HEAD", env=env).strip()
        repo_line = f"  - repo: {hooks}\n    rev: {rev}\n    hooks:\n      - id: grows-while-held\n"
    files[".pre-commit-config.yaml"] = f"repos:\n{repo_line}        files: ^python/sglang/\n"
    files["docs/old.py"] = ""
    repo = _repo(tmp_path / "sglang", {**files, "python/sglang/srt/ws.py": OLD}, env)
    module = repo / "python/sglang/srt/ws.py"
    module.write_text(OLD + NEW_SITE)
    (repo / "docs/old.py").write_text(OLD)  # outside files: not checked
    _git(repo, "add", "-A", env=env)
    code, out = _pre_commit(repo, env)
    assert code == 1 and "python/sglang/srt/" + NEW_LINE in out, out
    assert "docs/old.py" not in out and "Workspace.get" not in out
    module.write_text(OLD + MARKED)
    _git(repo, "add", "-A", env=env)
    code, out = _pre_commit(repo, env)
    assert code == 0 and "grows-while-held" in out and "Passed" in out, out
