"""The trust boundary (ci/THREATS.md N2): runner and reporter import apart."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ci_samples import registered
from conftest import clean_env

REPO = Path(__file__).resolve().parents[1]
# (package whose modules are read, the module prefixes none of them may import, why)
RULES = (
    ("ci/runner", ("ci.reporter", "github3"), "the runner runs PR code and holds no token"),
    ("ci/reporter", ("ci.runner",), "the reporter holds the token and never imports PR code"),
    ("ci", ("tools",), "the bot never imports the maintainer tools"),
    ("ci", ("sglang_overlay",), "the bot proves any sglang change and knows no product"),
)
PRODUCT_NAMES = ("sglang_overlay", "SGLANG_OVERLAY")


def _imports(path: Path, package: str):
    """(line, module) for each import of ``path``, relative ones resolved against ``package``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def crossings(root: Path, rules=RULES) -> list:
    """Each import under ``root`` that a rule forbids: 'path:line imports module (why)'."""
    found = []
    for folder, forbidden, why in rules:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            package = ".".join(rel.parent.parts)
            for line, module in _imports(path, package):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    found.append(f"{rel}:{line} imports {module} ({why})")
    return found


def test_no_import_crosses_the_trust_boundary():
    assert (REPO / "ci/runner").is_dir() and (REPO / "ci/reporter").is_dir()
    assert crossings(REPO) == []


def test_the_bots_code_names_none_of_the_products_modules_or_settings():
    named = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "ci").rglob("*.py"))
        for name in PRODUCT_NAMES
        if name in path.read_text()
    ]
    assert named == []


# A registered file that says what its process holds; it runs without importing sglang.
SAYS_WHAT_IT_HOLDS = registered(
    imports="import json, os, sys",
    body='held = {"env": sorted(os.environ), "modules": sorted(sys.modules)}\n        '
    'json.dump(held, open(os.path.join(os.environ["SEEN"], f"{os.getpid()}.json"), "w"))',
)
# What `ci run` itself loaded, printed at its exit: it runs `ci.__main__` as `python -m ci` does.
LOADED_AT_EXIT = (
    "import atexit, json, runpy, sys; "
    "atexit.register(lambda: print('LOADED', json.dumps(sorted(sys.modules)))); "
    "sys.argv = ['ci', *sys.argv[1:]]; runpy.run_module('ci', run_name='__main__')"
)
SECRETS = {"GITHUB_TOKEN": "ghs_x", "GH_PAT": "x", "SSH_AUTH_SOCK": "/tmp/agent", "AWS_SECRET_ACCESS_KEY": "x",
           "DATABASE_URL": "postgres://u:p@h/d", "OPENAI_KEY": "x", "PYPI_PASS": "x"}  # fmt: skip


def test_a_real_ci_run_loads_no_reporter_code_and_its_tests_hold_no_secret(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "test_holds.py").write_text(SAYS_WHAT_IT_HOLDS)
    (tmp_path / "seen").mkdir()
    (tmp_path / "none.txt").write_text("")
    argv = ["run", "--out", str(tmp_path / "out"), "--backend", "cpu", "--root", str(tmp_path / "root"),
            "--tests", "test_holds.py", "--regressions", str(tmp_path / "none.txt"), "--preload", "none",
            "--unmodified-env", "SEEN=" + str(tmp_path / "seen"), "--change-env", "SEEN=" + str(tmp_path / "seen"),
            "--change-env", "SIDE=change"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", LOADED_AT_EXIT, *argv],
        cwd=REPO,
        env=clean_env(**SECRETS),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (loaded,) = [
        json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("LOADED ")
    ]
    assert "ci.runner.run" in loaded
    assert [m for m in loaded if m.startswith(("ci.reporter", "github3"))] == []
    held = [json.loads(p.read_text()) for p in sorted((tmp_path / "seen").iterdir())]
    assert len(held) == 2  # one test process per side
    for process in held:
        assert set(SECRETS).isdisjoint(process["env"]), process["env"]
        assert "SGLANG_IS_IN_CI" in process["env"] and "PATH" in process["env"]
        assert not any(m.startswith(("ci.", "github3")) for m in process["modules"])


def _tree(tmp_path, files: dict) -> Path:
    for name, text in {"ci/runner/ok.py": "import os\n", "ci/reporter/ok.py": "", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "name, text, module",
    [
        ("ci/runner/run.py", "import github3\n", "github3"),
        ("ci/runner/run.py", "from ci import reporter\n", "ci.reporter"),
        ("ci/runner/run.py", "def f():\n    from ..reporter import pictures\n", "ci.reporter"),
        ("ci/reporter/plan.py", "from . import x\nfrom ..runner import run\n", "ci.runner"),
        ("ci/__main__.py", "from tools.releases import watch\n", "tools.releases"),
        ("ci/runner/run.py", "from ci.evidence import model\nfrom . import launch\n", None),
        ("ci/reporter/plan.py", "import github3\nfrom ci.evidence import judge\n", None),
        ("ci/__main__.py", "from ci.reporter import render\nfrom ci.runner import run\n", None),
        ("tools/series/x.py", "from ci.runner import modes\n", None),  # tools may use ci/
    ],
)
def test_the_check_fails_when_an_import_crosses_and_only_then(tmp_path, name, text, module):
    found = crossings(_tree(tmp_path, {name: text}))
    if module is None:
        assert found == []
    else:
        assert found and all(line.startswith(f"{name}:") for line in found), found
        assert any(f" imports {module} (" in line for line in found), found
