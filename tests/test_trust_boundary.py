"""The trust boundary, read from the imports (AST) of every module: the runner (runs PR code, no
token) never imports the reporter or github3; the reporter (holds the token) never imports the
runner; ``ci/`` never imports ``tools/``. An import inside a function counts like one at the top.
The checker is run on synthetic trees too, so that it is seen to fail when an import crosses."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# (package whose modules are read, the module prefixes none of them may import, why)
RULES = (
    ("ci/runner", ("ci.reporter", "github3"), "the runner runs PR code and holds no token"),
    ("ci/reporter", ("ci.runner",), "the reporter holds the token and never imports PR code"),
    ("ci", ("tools",), "the bot never imports the maintainer tools"),
)


def _imports(path: Path, package: str):
    """(line, module) for each import of ``path``; relative imports resolved against
    ``package``, the dotted name of the package holding ``path``."""
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
            # `from ci import reporter` imports ci.reporter
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


def _tree(tmp_path, files: dict) -> Path:
    for name, text in {"ci/runner/ok.py": "import os\n", "ci/reporter/ok.py": "", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "name, text, module",
    [
        ("ci/runner/run.py", "import github3\n", "github3"),
        ("ci/runner/run.py", "import github3.exceptions as e\n", "github3.exceptions"),
        ("ci/runner/run.py", "from ci.reporter import render\n", "ci.reporter"),
        ("ci/runner/run.py", "from ci import reporter\n", "ci.reporter"),
        ("ci/runner/run.py", "def f():\n    from ..reporter import pictures\n", "ci.reporter"),
        ("ci/reporter/plan.py", "from ci.runner.launch import run_all\n", "ci.runner.launch"),
        ("ci/reporter/plan.py", "from . import x\nfrom ..runner import run\n", "ci.runner"),
        ("ci/__main__.py", "from tools.releases import watch\n", "tools.releases"),
        ("ci/evidence/model.py", "import tools.series.seriesdir\n", "tools.series.seriesdir"),
    ],
)
def test_the_check_fails_when_an_import_crosses(tmp_path, name, text, module):
    found = crossings(_tree(tmp_path, {name: text}))
    assert found and all(line.startswith(f"{name}:") for line in found), found
    assert any(f" imports {module} (" in line for line in found), found


def test_the_check_passes_what_stays_on_its_side(tmp_path):
    files = {
        "ci/runner/run.py": "from ci.evidence import model\nfrom . import launch\n",
        "ci/reporter/plan.py": "import github3\nfrom ci.evidence import judge\n",
        "ci/__main__.py": "from ci.reporter import render\nfrom ci.runner import run\n",
        "tools/series/x.py": "from ci.runner import modes\n",  # tools may use ci/
    }
    assert crossings(_tree(tmp_path, files)) == []
