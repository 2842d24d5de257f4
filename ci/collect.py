"""Which registered test files a CI run executes, decided by sglang's own registry parser.

For selecting files only: it reads ``register_*_ci(...)`` calls through
``sglang.test.ci.ci_register.collect_tests`` (the same AST reader upstream's runner uses), so a
file registered here is registered the same way upstream. It never imports or runs a test file,
and never imports the sglang package: the reader is loaded from the installed sglang on its own.
"""

import ast
import glob
import importlib.util
import os
import sys
from dataclasses import dataclass

CI_REGISTER = "sglang.test.ci.ci_register"
# The reader's own name in sys.modules when it is loaded without its package.
READER_MODULE = "_sglang_ci_register_reader"

BACKENDS = ("cuda", "cpu")
REGISTERED_ROOT = "test/registered"


@dataclass(frozen=True)
class Selected:
    """One file to run, with the registration that selected it."""

    path: str  # relative to the repository root
    suite: str | None
    stage: str | None
    est_time: float


class SelectionError(ValueError):
    """Bad filter or shard arguments; the CLI turns it into exit code 2."""


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` with 0 <= I < N (upstream's partition ids count from 0)."""
    if not text:
        return None
    try:
        index, size = (int(part) for part in text.split("/"))
    except ValueError:
        raise SelectionError(f"--shard {text!r}: expected I/N, e.g. 0/2") from None
    if size < 1 or not 0 <= index < size:
        raise SelectionError(f"--shard {text!r}: need 0 <= I < N")
    return index, size


def select(
    root: str,
    backend: str,
    suite: str | None = None,
    stage: str | None = None,
    shard: tuple[int, int] | None = None,
    include_nightly: bool = False,
) -> list[Selected]:
    """Registered files under ``root``/test/registered for one backend, filtered and sharded."""
    reader = registry_reader()
    if backend not in BACKENDS:
        raise SelectionError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    pattern = os.path.join(root, REGISTERED_ROOT, "**", "test_*.py")
    files = sorted(glob.glob(pattern, recursive=True))
    wanted = reader.HWBackend[backend.upper()]
    registries = [
        r
        for r in reader.collect_tests(files, sanity_check=True)
        if r.backend == wanted
        and r.disabled is None
        and (include_nightly or not r.nightly)
        and (suite is None or r.effective_suite == suite)
        and (stage is None or r.stage == stage)
    ]
    if shard is not None:
        registries = reader.auto_partition(registries, shard[0], shard[1])
    chosen = {}
    for r in registries:
        # A file registered twice for one backend still runs once.
        chosen.setdefault(r.filename, r)
    return [
        Selected(
            path=os.path.relpath(r.filename, root),
            suite=r.effective_suite,
            stage=r.stage,
            est_time=r.est_time,
        )
        for r in sorted(chosen.values(), key=lambda r: r.filename)
    ]


def registry_reader():
    """sglang's ``ci_register`` module, without importing the sglang package.

    The reader needs only the standard library, while ``import sglang`` imports torch and
    transformers and, on 0.5.23, creates a CUDA context: seconds, and CUDA state in the CI
    process, before any test could start. Raises ImportError when sglang is not installed or
    its reader does not load (it is the PR's code on a PR's runner: it may raise anything).
    """
    loaded = sys.modules.get(CI_REGISTER) or sys.modules.get(READER_MODULE)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("sglang")  # locates the package, runs none of it
    places = (package.submodule_search_locations or []) if package else []
    for place in places:
        path = os.path.join(place, "test", "ci", "ci_register.py")
        if os.path.isfile(path):
            break
    else:
        raise ImportError("no sglang/test/ci/ci_register.py on the path (is sglang installed?)")
    spec = importlib.util.spec_from_file_location(READER_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[READER_MODULE] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[READER_MODULE]
        if isinstance(exc, Exception):
            raise ImportError(f"{path}: {type(exc).__name__}: {exc}") from exc
        raise
    return module


def test_lines(root: str, path: str) -> dict:
    """``Class.test_name`` -> the line of its ``def`` in a test file (for annotations).

    Methods a class inherits from another class of the same file (a shared base of the CPU
    and CUDA classes) point at the base's ``def``.
    """
    try:
        with open(os.path.join(root, path)) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def methods(name: str, seen: frozenset) -> dict:
        node = classes.get(name)
        if node is None or name in seen:
            return {}
        found = {}
        for base in reversed(node.bases):
            if isinstance(base, ast.Name):
                found.update(methods(base.id, seen | {name}))
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[item.name] = item.lineno
        return found

    return {
        f"{cls}.{fn}": line for cls in classes for fn, line in methods(cls, frozenset()).items()
    }
