"""Which registered test files a run executes, decided by sglang's own registry reader (the AST
reader upstream's runner uses), loaded on its own from the first side's tree that has it, else
the installed sglang. Each file is parsed once (``Tree``); nothing of it or of sglang runs here.
"""

import ast
import fnmatch
import importlib.util
import os
import sys

from ci.errors import CiError

READER_MODULE = "_sglang_ci_register_reader"  # the reader's name when loaded without its package
REGISTERED_ROOT = "test/registered"
FRESH_MARK = "# ci: fresh-interpreter"
LINK_NOT_FOLLOWED = "a link to a folder: not followed (its tests are not run through it)"
# What a side preloads when not told: the modules of these packages the files import. On CUDA
# only torch: importing sglang initialises CUDA on some machines, which a fork cannot use.
PRELOADED_PACKAGES = {"cpu": ("torch", "sglang"), "cuda": ("torch",)}
_ENV_CALLS = {"update", "setdefault", "pop", "clear", "popitem", "__setitem__", "__delitem__"}


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` with 0 <= I < N (upstream's partition ids count from 0)."""
    if not text:
        return None
    try:
        index, size = (int(part) for part in text.split("/"))
    except ValueError:
        raise CiError(f"--shard {text!r}: expected I/N, e.g. 0/2") from None
    if size < 1 or not 0 <= index < size:
        raise CiError(f"--shard {text!r}: need 0 <= I < N")
    return index, size


class Tree:
    """The test files under ``tests`` (under ``root``, default test/registered), each parsed once.
    A link to a folder is not followed (one to its own folder repeats it at every depth): ``links``
    names them, as ``ci run`` reports them."""

    def __init__(self, root: str, tests=()):
        self.root, self.links, self.parsed, found = os.path.abspath(root), [], {}, set()
        for entry in tests or (REGISTERED_ROOT,):
            path = os.path.join(self.root, entry)
            if os.path.isfile(path):
                found.add(os.path.abspath(path))
                continue
            if not os.path.isdir(path):
                raise CiError(f"--tests {entry}: no such file or folder under {self.root}")
            for folder, dirs, files in os.walk(path, onerror=_unreadable):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # as glob's ** does
                for name in [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                    dirs.remove(name)
                    link = os.path.relpath(os.path.join(folder, name), self.root)
                    self.links.append({"file": link, "why": LINK_NOT_FOLLOWED})
                found.update(
                    os.path.abspath(os.path.join(folder, n))
                    for n in files
                    if fnmatch.fnmatchcase(n, "test_*.py")
                )
        top = os.path.realpath(self.root)
        for path in found:
            if os.path.commonpath([top, os.path.realpath(path)]) != top:
                raise CiError(f"--tests: {path} is outside --root {self.root}")
        self.files = sorted(found)
        for path in self.files:
            try:
                with open(path, "rb") as handle:
                    self.parsed[path] = ast.parse(handle.read())
            except (SyntaxError, ValueError, OSError):
                self.parsed[path] = None

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def select(self, backend, suite=None, stage=None, shard=None, nightly=False, trees=()):
        """(the files to run: path under the root -> its suite, the files registered only for
        other backends with why), filtered by suite, stage and nightly, and sharded."""
        reader = registry_reader(trees)
        parsed = [p for p in self.files if self.parsed[p] is not None]
        registries = reader.collect_tests(parsed, sanity_check=True)
        wanted = reader.HWBackend[backend.upper()]
        chosen, backends = {}, {}
        for r in registries:
            backends.setdefault(r.filename, set()).add(r.backend.name.lower())
            if (
                r.backend == wanted
                and r.disabled is None
                and (nightly or not r.nightly)
                and suite in (None, r.effective_suite)
                and stage in (None, r.stage)
            ):
                chosen.setdefault(r.filename, r)  # registered twice: runs once, in one shard
        units = list(chosen.values())
        if shard is not None:
            units = reader.auto_partition(units, shard[0], shard[1])
            # Newer readers bundle an ``in_process_group`` into one unit with its ``members``.
            units = [m for unit in units for m in getattr(unit, "members", None) or [unit]]
        units = sorted(units, key=lambda r: r.filename)
        selected = {self.rel(r.filename): r.effective_suite for r in units}
        # A file that does not parse has no registration: it runs (in the first shard), and its
        # own process says why it fails, as a case of the report.
        if shard is None or shard[0] == 0:
            selected.update({self.rel(p): None for p in self.files if self.parsed[p] is None})
        elsewhere = [
            {"file": self.rel(path), "why": f"registered for {', '.join(sorted(on))} only"}
            for path, on in sorted(backends.items())
            if backend not in on
        ]
        return selected, elsewhere

    def fresh_reason(self, rel: str) -> str | None:
        """Why a file must not fork from preloaded modules: it asks (``FRESH_MARK``), or it
        changes the environment as it is imported, after the preloaded modules read it."""
        tree = self.parsed.get(os.path.join(self.root, rel))
        if tree is None:
            return None
        for node in _module_level(tree.body):
            if _changes_environment(node):
                return f"it changes the environment as it is imported (line {node.lineno})"
        with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip() == FRESH_MARK:
                    return f"it asks for one (line {number})"
        return None

    def default_preload(self, rels, backend: str) -> tuple:
        """The modules of ``PRELOADED_PACKAGES[backend]`` the files ``rels`` (those that may
        fork) import at module level, torch first; on CUDA a file importing sglang brings torch."""
        wanted, found = PRELOADED_PACKAGES[backend], set()
        for rel in rels:
            tree = self.parsed.get(os.path.join(self.root, rel))
            if tree is None:
                continue
            for node in _module_level(tree.body):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.partition(".")[0]
                    if top in wanted:
                        found.add(name)
                    elif top == "sglang" and backend == "cuda":
                        found.add("torch")
        return tuple(sorted(found, key=lambda name: (not name.startswith("torch"), name)))

    def def_line(self, rel: str, test: str) -> int | None:
        """The line of the ``def`` of ``test`` (``Class.test_name``, a function's name, or a
        parametrized ``test_x[1]``); a method inherited from a class of the same file has the
        base's."""
        tree = self.parsed.get(os.path.join(self.root, rel))
        if tree is None:
            return None
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        functions = (ast.FunctionDef, ast.AsyncFunctionDef)

        def methods(name: str, seen: frozenset) -> dict:
            node = classes.get(name)
            if node is None or name in seen:
                return {}
            found = {}
            for base in reversed(node.bases):
                if isinstance(base, ast.Name):
                    found.update(methods(base.id, seen | {name}))
            found.update({i.name: i.lineno for i in node.body if isinstance(i, functions)})
            return found

        lines = {node.name: node.lineno for node in tree.body if isinstance(node, functions)}
        for cls in classes:
            lines.update({f"{cls}.{fn}": n for fn, n in methods(cls, frozenset()).items()})
        return lines.get(test) or lines.get(test.split("[", 1)[0])


def _unreadable(error: OSError) -> None:
    raise CiError(f"--tests: {error.filename}: {error.strerror}")


def _module_level(body):
    """Statements that run as the module is imported: not function or class bodies."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from _module_level(inner)


def _is_environ(node) -> bool:  # os.environ, or environ
    return getattr(node, "attr", getattr(node, "id", None)) == "environ"


def _changes_environment(node) -> bool:
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        return any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        if isinstance(func, ast.Attribute):
            if func.attr in _ENV_CALLS and _is_environ(func.value):
                return True
            return func.attr in ("putenv", "unsetenv")
    return False


def registry_reader(trees=()):
    """sglang's ``ci_register`` from the first of ``trees`` (folders holding ``python/sglang``)
    that has one, else the installed sglang; ImportError when none loads. Not through the sglang
    package: the reader is stdlib only, ``import sglang`` costs seconds and CUDA state. Loaded
    anew on each call, so a run reads with its own tree's reader."""
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
    except Exception as exc:
        del sys.modules[READER_MODULE]
        raise ImportError(f"{path}: {type(exc).__name__}: {exc}") from exc
    return module
