"""Whether a test file may run as a fork of a side's preloading parent (``ci run --preload``),
read from its source and never run: pure, for ``launch``.

A file runs in a fresh interpreter when it says so (a line ``# sglang-overlay:
fresh-interpreter``), or when it changes the environment as it is imported (``os.environ[...] =
...``, ``os.environ.update(...)``, ``os.putenv(...)`` at module level): sglang and torch read
many settings when they are imported, which in a fork happened in the parent, before the file
ran, so the file would test other settings than it asked for. ``default_preload`` says what a
side preloads when ``--preload`` is not given.
"""

import ast

MARK = "# sglang-overlay: fresh-interpreter"
_ENV_CALLS = {"update", "setdefault", "pop", "clear", "popitem", "__setitem__", "__delitem__"}


def fresh_reason(path: str) -> str | None:
    """Why the file at ``path`` must start in a fresh interpreter, or None."""
    try:
        with open(path, "rb") as handle:
            source = handle.read()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None  # its own process says what is wrong with it, forked or not
    text = source.decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == MARK:
            return f"it asks for one (line {number})"
    for node in _module_level(tree.body):
        if _changes_environment(node):
            return (
                f"it changes the environment as it is imported (line {node.lineno}), after "
                "the preloaded modules read it"
            )
    return None


def _module_level(body):
    """Statements that run as the module is imported: the top level and the blocks in it, not
    function or class bodies."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from _module_level(inner)


def _is_environ(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


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


# What ``ci run`` preloads when not told (``--preload`` not given): the modules of these packages
# that the files import as they are imported. On CUDA only torch: importing torch initialises no
# CUDA, while importing sglang does on some machines (BENCHMARKS.md, the H200 preload runs), and
# a forked child cannot use a parent's CUDA.
PRELOADED_PACKAGES = {"cpu": ("torch", "sglang"), "cuda": ("torch",)}


def default_preload(paths, backend: str) -> tuple:
    """The modules a side imports once before forking each of the files at ``paths``: those of
    ``PRELOADED_PACKAGES[backend]`` that the forkable files import at module level (``import X``,
    ``from X import name``), torch first; on CUDA a file importing sglang imports torch too.
    Empty when no file would fork or none imports them: a preloading parent would only cost."""
    wanted, found = PRELOADED_PACKAGES[backend], set()
    for path in paths:
        if fresh_reason(path) is not None:
            continue
        for name in _imported(path):
            top = name.partition(".")[0]
            if top in wanted:
                found.add(name)
            elif top == "sglang" and backend == "cuda":
                found.add("torch")
    return tuple(sorted(found, key=lambda name: (not name.startswith("torch"), name)))


def _imported(path: str) -> list:
    """The absolute module names the file at ``path`` imports at module level."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names
