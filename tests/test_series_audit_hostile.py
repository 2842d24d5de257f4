"""Issue 34, breaks 5 and 6: the grow-while-held audit and its hook against hostile input.

Markers come from comments only (never a string's text), exempt exactly their own statement, and
need a visible reason; every file that cannot be read (a link, a FIFO, a device, too big, too
deep, an encoding it declares) is named in one line and the run goes on; nothing crashes or hangs.
"""

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.series import audit, audit_marks, audit_tree
from tools.series.seriesdir import REPO_ROOT

HOOK = REPO_ROOT / "tools/series/grow_hook.py"
SITE = "self.buf = torch.empty(n)"


def _module(body: str) -> str:
    return "import torch\n\n\nclass W:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _verdicts(body: str) -> "dict[str, str]":
    return {s.target: s.verdict for s in audit.audit_source(_module(body), "m.py")}


# -- break 5: what counts as a marker -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        f'def get(self, n):\n    """# grows-while-held: keeps-old-on-purpose docstring"""\n    {SITE}\n',
        f'def get(self, n):\n    s = "# grows-while-held: keeps-old-on-purpose in a string"\n'
        f"    {SITE}\n",
        f'def get(self, n):\n    {SITE}; s = "# grows-while-held: keeps-old-on-purpose x"\n',
        f'def get(self, n):\n    s = """\n# grows-while-held: keeps-old-on-purpose x\n"""\n    {SITE}\n',
    ],
    ids=["docstring", "string-above", "string-same-line", "multiline-string"],
)
def test_a_marker_inside_a_string_or_docstring_exempts_nothing(body):
    assert _verdicts(body) == {"self.buf": "grows-while-held"}


def test_a_trailing_marker_exempts_its_own_statement_only():
    body = (
        "def get(self, n):\n"
        "    self.a = torch.empty(n)  # grows-while-held: keeps-old-on-purpose graph reads it\n"
        "    self.b = torch.empty(n)\n"
    )
    assert _verdicts(body) == {"self.a": "keeps-old-on-purpose", "self.b": "grows-while-held"}


def test_a_comment_line_above_still_marks_the_statement_below():
    body = (
        "def get(self, n):\n"
        "    # grows-while-held: keeps-old-on-purpose a captured graph reads the old one\n"
        "    # (and a second comment line)\n"
        "    self.b = torch.empty(n)\n"
    )
    assert _verdicts(body) == {"self.b": "keeps-old-on-purpose"}


@pytest.mark.parametrize("reason", ["\u200b", "\u200b\u200d\ufeff", "\u202e", " \t", "\u00a0"])
def test_a_reason_of_invisible_characters_is_no_reason(reason):
    body = f"def get(self, n):\n    {SITE}  # grows-while-held: keeps-old-on-purpose {reason}\n"
    assert _verdicts(body) == {"self.buf": "grows-while-held"}
    assert audit_marks.bare_markers(_module(body)) == [6]


def _hook(cwd: Path, *files, timeout=30) -> "tuple[int, str]":
    proc = subprocess.run(
        [sys.executable, str(HOOK), *files],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_the_hook_refuses_string_markers_and_a_zero_width_reason(tmp_path):
    (tmp_path / "ws.py").write_text(
        _module(
            'def get(self, n):\n    """# grows-while-held: keeps-old-on-purpose doc"""\n'
            f"    {SITE}\n"
            "def kv(self, n):\n"
            "    self.a = torch.empty(n)  # grows-while-held: keeps-old-on-purpose \u200b\n"
        )
    )
    code, out = _hook(tmp_path, "ws.py")
    assert code == 1
    assert "ws.py:7: W.get allocates the new self.buf" in out
    assert "ws.py:9: W.kv allocates the new self.a" in out
    assert "ws.py:9: a keeps-old-on-purpose marker must say why" in out


# -- break 6: files that cannot be read -----------------------------------------------------------

DEEP_ATTRIBUTE = _module("def get(self, n):\n    x = a" + ".b" * 1000 + f"\n    {SITE}\n")
LONG_EXPRESSION = _module("def get(self, n):\n    x = " + " + ".join(["a"] * 3000) + "\n")
LATIN1 = (
    "# -*- coding: latin-1 -*-\n" + _module(f"def get(self, n):\n    s = 'caf\u00e9'\n    {SITE}\n")
).encode("latin-1")


def _tree(root: Path) -> Path:
    """An sglang-shaped tree with one hostile entry of each kind, and one good file after them."""
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    srt = pkg / "srt"
    (srt / "deep_attr.py").write_text(DEEP_ATTRIBUTE)
    (srt / "long_expr.py").write_text(LONG_EXPRESSION)
    (srt / "latin1.py").write_bytes(LATIN1)
    (srt / "loop.py").symlink_to("loop.py")
    (srt / "zero.py").symlink_to("/dev/zero")
    os.mkfifo(srt / "fifo.py")
    with open(srt / "huge.py", "wb") as f:
        f.truncate(50 * 1024 * 1024)  # 50 MB (sparse): refused by size before any read
    (srt / "loopdir").symlink_to("..")
    (srt / "zz_good.py").write_text(_module(f"def get(self, n):\n    {SITE}\n"))
    return pkg


def test_the_audit_names_each_unreadable_file_and_goes_on(tmp_path):
    pkg = _tree(tmp_path)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tools.series", "audit", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    skipped = {
        line.split(":")[0].removeprefix("skipped "): line for line in proc.stderr.splitlines()
    }
    assert sorted(skipped) == [
        f"sglang/srt/{n}.py" for n in ("deep_attr", "fifo", "huge", "long_expr", "loop", "zero")
    ]
    assert "a link, not followed" in skipped["sglang/srt/loop.py"]
    assert "a link, not followed" in skipped["sglang/srt/zero.py"]
    assert "not a regular file" in skipped["sglang/srt/fifo.py"]
    assert "byte bound" in skipped["sglang/srt/huge.py"]
    # the PEP 263 latin-1 file is read, and its site found; so is the good file after the rest
    assert "sglang/srt/latin1.py:8" in proc.stdout and "sglang/srt/zz_good.py:6" in proc.stdout
    assert took < 30 and pkg.is_dir()


def test_the_hook_names_each_unreadable_file_and_goes_on(tmp_path):
    srt = _tree(tmp_path) / "srt"
    names = sorted(p.name for p in srt.iterdir() if p.name.endswith(".py"))
    code, out = _hook(srt, *names)
    assert code == 1 and "Traceback" not in out
    for name in ("deep_attr", "fifo", "huge", "long_expr", "loop", "zero"):
        assert f"{name}.py: cannot be checked:" in out
    assert "latin1.py:8: W.get allocates the new self.buf" in out
    assert "zz_good.py:6: W.get allocates the new self.buf" in out


# -- the fuzz: random hostile trees, a bound on time ---------------------------------------------

_PIECES = [
    lambda r: "x = " + "(" * r.randint(1, 400) + "1" + ")" * r.randint(0, 400) + "\n",
    lambda r: "x = a" + ".b" * r.randint(1, 3000) + "\n",
    lambda r: "x = " + " * ".join(["a"] * r.randint(1, 5000)) + "\n",
    lambda r: _module(f"def g(self, n):\n    {SITE}  # grows-while-held: keeps-old-on-purpose\n"),
    lambda r: "# coding: " + r.choice(["latin-1", "utf-16", "nope", "cp1252", "utf-8-sig"]) + "\n",
    lambda r: "".join(chr(r.randint(0, 0x10FFFF)) for _ in range(r.randint(0, 200))),
    lambda r: "'''" * r.randint(1, 3) + "# grows-while-held: keeps-old-on-purpose\n",
    lambda r: "\ufeff" + _module(f"def g(self, n):\n    {SITE}\n"),
]


def _fuzz_tree(rng: random.Random, root: Path) -> "list[str]":
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    folders, files = [pkg / "srt"], []
    for i in range(rng.randint(5, 25)):
        where = rng.choice(folders)
        name = where / f"f{i}\x1b[2K\u202e.py" if rng.random() < 0.1 else where / f"f{i}.py"
        kind = rng.random()
        if kind < 0.15:
            folders.append(where / f"d{i}")
            folders[-1].mkdir()
            continue
        if kind < 0.25:
            name.symlink_to(rng.choice(["/dev/zero", str(name), "..", "/nonexistent", "f0.py"]))
        elif kind < 0.3:
            os.mkfifo(name)
        elif kind < 0.4:
            name.write_bytes(os.urandom(rng.randint(0, 4096)))
        else:
            text = "".join(rng.choice(_PIECES)(rng) for _ in range(rng.randint(1, 4)))
            name.write_bytes(text.encode("utf-8", "surrogatepass"))
        files.append(str(name.relative_to(pkg / "srt")))
    deep = pkg / "srt"
    for _ in range(rng.randint(0, 300)):
        deep = deep / "n"
    deep.mkdir(parents=True, exist_ok=True)
    (deep / "x.py").write_text("x = 1\n")
    return files


def test_fuzz_random_hostile_trees_never_crash_or_hang(tmp_path):
    start = time.monotonic()
    for seed in range(4):
        rng = random.Random(seed)
        root = tmp_path / f"t{seed}"
        files = _fuzz_tree(rng, root)
        sites, skipped = audit_tree.audit_package(root / "sglang")
        assert all("\x1b" not in line and "\u202e" not in line for line in skipped)
        code, out = _hook(root / "sglang" / "srt", *files, timeout=20)
        assert code in (0, 1) and "Traceback" not in out, out
        assert "\x1b" not in out
    assert time.monotonic() - start < 20
