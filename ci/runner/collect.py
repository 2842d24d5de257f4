"""Which registered test files a CI run executes, decided by sglang's own registry reader
(``ci_register.collect_tests``, the AST reader upstream's runner uses), loaded on its own from the
first given source tree that has it, else the installed sglang. It never imports or runs a test
file, nor the sglang package.
"""

import ast
import fnmatch
import importlib.util
import os
import sys
from dataclasses import dataclass

from ci.runner import RequestError

# The reader's own name in sys.modules when it is loaded without its package.
READER_MODULE = "_sglang_ci_register_reader"
REGISTERED_ROOT = "test/registered"


@dataclass(frozen=True)
class Selected:
    """One file to run, with the registration that selected it."""

    path: str  # relative to the repository root
    suite: str | None


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` with 0 <= I < N (upstream's partition ids count from 0)."""
    if not text:
        return None
    try:
        index, size = (int(part) for part in text.split("/"))
    except ValueError:
        raise RequestError(f"--shard {text!r}: expected I/N, e.g. 0/2") from None
    if size < 1 or not 0 <= index < size:
        raise RequestError(f"--shard {text!r}: need 0 <= I < N")
    return index, size


def shard_text(text: str | None) -> str | None:
    """A ``--shard`` as results record it: ``"I/N"``, or None."""
    shard = parse_shard(text)
    return f"{shard[0]}/{shard[1]}" if shard else None


def scan(root: str, tests=()) -> tuple[list[str], list[str]]:
    """(every ``test_*.py`` under each of ``tests``, sorted, each once; the links to folders
    among them, relative to ``root``). ``tests`` are folders or files relative to ``root``,
    default ``root``/test/registered. A link to a folder is never followed: one that points at
    its own folder would run the same files again at every depth."""
    found, links = set(), set()
    for entry in tests or (REGISTERED_ROOT,):
        path = os.path.join(root, entry)
        if os.path.isfile(path):
            found.add(os.path.abspath(path))
        elif os.path.isdir(path):
            for folder, dirs, files in os.walk(path, onerror=_unreadable):
                # as glob's ** does: hidden names left out
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                    dirs.remove(name)
                    links.add(os.path.relpath(os.path.join(folder, name), root))
                found.update(
                    os.path.abspath(os.path.join(folder, name))
                    for name in files
                    if fnmatch.fnmatchcase(name, "test_*.py")
                )
        else:
            raise RequestError(f"--tests {entry}: no such file or folder under {root}")
    top = os.path.realpath(root)
    outside = [p for p in found if os.path.commonpath([top, os.path.realpath(p)]) != top]
    if outside:
        raise RequestError(f"--tests: {outside[0]} is outside --root {root}")
    return sorted(found), sorted(links)


def _unreadable(error: OSError) -> None:
    raise RequestError(f"--tests: {error.filename}: {error.strerror}")


def select(root, backend, suite=None, stage=None, shard=None, nightly=False, tests=(), trees=()):
    """Registered files (``Selected``) among ``tests`` for one backend, filtered by suite, stage
    and nightly, and sharded (``shard``: index, size)."""
    files, unparsable = [], []
    for path in scan(root, tests)[0]:
        (files if _parsed(path) else unparsable).append(path)
    reader = registry_reader(trees)
    wanted = reader.HWBackend[backend.upper()]
    registries = [
        r
        for r in reader.collect_tests(files, sanity_check=True)
        if r.backend == wanted
        and r.disabled is None
        and (nightly or not r.nightly)
        and (suite is None or r.effective_suite == suite)
        and (stage is None or r.stage == stage)
    ]
    chosen = {}
    for r in registries:
        # A file registered twice for one backend runs once, so in one shard only.
        chosen.setdefault(r.filename, r)
    registries = list(chosen.values())
    if shard is not None:
        units = reader.auto_partition(registries, shard[0], shard[1])
        # Newer readers bundle an ``in_process_group`` into one unit with its ``members``.
        registries = [m for unit in units for m in getattr(unit, "members", None) or [unit]]
    registries = sorted(registries, key=lambda r: r.filename)
    selected = [Selected(os.path.relpath(r.filename, root), r.effective_suite) for r in registries]
    # A file that does not parse has no registration anyone can read: it runs anyway (in the
    # first shard), and its own process says why it fails, as a case of the report.
    if shard is None or shard[0] == 0:
        selected += [Selected(os.path.relpath(p, root), None) for p in unparsable]
    return selected


def not_here(root, backend, tests=(), trees=()) -> list:
    """Files among ``tests`` registered for other backends only, each with why it did not run
    on ``backend`` (the report says so: a CUDA test is not silently missing from a CPU run)."""
    files = [p for p in scan(root, tests)[0] if _parsed(p)]
    reader = registry_reader(trees)
    backends: dict = {}
    for r in reader.collect_tests(files, sanity_check=False):
        backends.setdefault(r.filename, set()).add(r.backend.name.lower())
    return [
        {"file": os.path.relpath(path, root), "why": f"registered for {', '.join(sorted(on))} only"}
        for path, on in sorted(backends.items())
        if backend not in on
    ]


def _parsed(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read())
    except (SyntaxError, ValueError, OSError):
        return None


def registry_reader(trees=()):
    """sglang's ``ci_register`` module from the first of ``trees`` (folders holding
    ``python/sglang``) that has one, else the installed sglang; ImportError when none loads.

    Not through the sglang package: the reader needs only the standard library, while ``import
    sglang`` costs seconds and puts CUDA state in the CI process before any test could start.
    """
    loaded = sys.modules.get(READER_MODULE)
    if loaded is not None:
        return loaded
    places = [os.path.join(tree, "python", "sglang") for tree in trees]
    package = importlib.util.find_spec("sglang")  # locates the package, runs none of it
    places += (package.submodule_search_locations or []) if package else []
    paths = (os.path.join(place, "test", "ci", "ci_register.py") for place in places)
    path = next((path for path in paths if os.path.isfile(path)), None)
    if path is None:
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
    """``Class.test_name`` (or a pytest function's name) -> the line of its ``def`` in a test
    file, for annotations; a method inherited from a class of the same file has the base's."""
    tree = _parsed(os.path.join(root, path))
    if tree is None:
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

    lines = {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for cls in classes:
        lines.update({f"{cls}.{fn}": line for fn, line in methods(cls, frozenset()).items()})
    return lines


def line_of(lines: dict, test: str) -> int | None:
    """The ``def`` line of a test id, parametrized ids (``test_x[1]``) included."""
    return lines.get(test) or lines.get(test.split("[", 1)[0])
