"""Recognise which shape of a patched method a loaded sglang module has: the sha256 of the
method's exact source text, or, where only bytecode is deployed, of its code object; and
whether another plugin's hook now stands over the overlay's method (``foreign_hook``). Reads
source files; never changes anything.
"""

import ast
import functools
import hashlib
import inspect
import sys
from dataclasses import dataclass

from sglang_overlay.sites import DSV4, Site, WorkspaceShape


@dataclass(frozen=True)
class Recognition:
    """What the overlay found: a known shape, or a state and the reason it is not patchable."""

    state: str  # "recognised", "not-present", "upstream-fixed", "unsupported"
    target: str
    reason: str
    shape: "WorkspaceShape | None" = None
    cls: "type | None" = None


def workspace_class(module, site: "Site | None" = None) -> "type | None":
    """The class ``site`` patches (the DSV4 workspace by default) that ``module`` defines,
    under any of its published names."""
    site = site or DSV4
    for name in site.class_names:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            # A plugin's subclass in its place (sglang's HookRegistry class REPLACE) runs the
            # method of the first class on its MRO that defines one: that class is the one to
            # patch and check.
            defines = (c for c in cls.__mro__ if any(m in vars(c) for m in site.methods))
            return next(defines, cls)
    return None


CODE_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # the order of WorkspaceShape.code_sha256


def code_sha256(code) -> str:
    """A code object's behaviour as this CPython compiled it: bytecode, names, argument
    counts, flags and constants (nested code included); no file name or line numbers."""

    def parts(c):
        consts = tuple(parts(k) if isinstance(k, type(c)) else repr(k) for k in c.co_consts)
        return (c.co_code, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars,
                c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags, consts)  # fmt: skip

    return hashlib.sha256(repr(parts(code)).encode()).hexdigest()[:12]


def recognise(module, site: "Site | None" = None) -> Recognition:
    """Classify the class ``site`` patches (the DSV4 workspace by default) in ``module``."""
    site = site or DSV4
    name = module.__name__
    cls = workspace_class(module, site)
    if cls is None:
        return Recognition(
            "not-present", name, f"{name} defines none of {', '.join(site.class_names)}"
        )
    method = next((m for m in site.methods if m in vars(cls)), site.methods[-1])
    target = f"{name}.{cls.__name__}.{method}"
    func = vars(cls).get(method)
    if func is None or not inspect.isfunction(func):
        return Recognition(
            "unsupported", target, f"{cls.__name__} has no plain {method}() method", cls=cls
        )
    try:
        module_source = inspect.getsource(module)
    except (OSError, TypeError) as exc:
        return _recognise_bytecode(module, site, cls, method, func, target, exc)
    node = _method_node(module_tree(module_source), cls.__name__, method)
    if node is None or func.__code__.co_firstlineno != _first_line(node):
        return Recognition(
            "unsupported",
            target,
            f"{cls.__name__}.{method} is not the function defined in {name}'s source "
            "(something else already replaced it)",
            cls=cls,
        )
    digest = hashlib.sha256(ast.get_source_segment(module_source, node).encode()).hexdigest()[:12]
    for shape in site.shapes:
        if (shape.class_name, shape.method, shape.source_sha256) == (cls.__name__, method, digest):
            return _recognised(module, site, shape, cls, target, f"sha256 {digest}")
    if releases_first(node, site.released):
        return Recognition(
            "upstream-fixed",
            target,
            f"{cls.__name__}.{method} (sha256 {digest}) already drops the old "
            f"{', '.join(site.released)} before allocating",
            cls=cls,
        )
    return Recognition(
        "unsupported",
        target,
        f"unknown source of {cls.__name__}.{method} (sha256 {digest}); known: "
        + ", ".join(f"{s.source_sha256} ({s.releases})" for s in site.shapes),
        cls=cls,
    )


def all_or_none(found: "list[Recognition]") -> Recognition:
    """One patch's recognition from its sites' (``recognise`` of each, in order): patched only
    when every method is recognised; a state all share is the patch's; any other mix leaves
    the patch unsupported, its reason naming each method's state."""
    if len(found) == 1:
        return found[0]
    states = {f.state for f in found}
    state = states.pop() if len(states) == 1 else "unsupported"
    reasons = list(dict.fromkeys(f.reason for f in found))
    if len(reasons) > 1:
        reasons = [f"{f.target.rsplit('.', 1)[-1]}: {f.reason}" for f in found]
    if state == "unsupported":
        reasons.append("the patch replaces all of its methods or none")
    return Recognition(state, ", ".join(dict.fromkeys(f.target for f in found)), "; ".join(reasons))


@functools.lru_cache(maxsize=1)
def module_tree(source: str) -> ast.Module:
    """``source`` parsed once for every method of a patch (recognised and rewritten); dropped
    once the patch is applied. Read-only."""
    return ast.parse(source)


def _recognise_bytecode(module, site, cls, method, func, target, why) -> Recognition:
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    digest = code_sha256(func.__code__)
    ours = func.__qualname__ == f"{cls.__name__}.{method}" and func.__module__ == module.__name__
    for shape in site.shapes if ours and python in CODE_PYTHONS else ():
        same_method = (shape.class_name, shape.method) == (cls.__name__, method)
        known = shape.code_sha256[CODE_PYTHONS.index(python)] if shape.code_sha256 else None
        if same_method and known == digest:
            return _recognised(
                module, site, shape, cls, target, f"bytecode only, code sha256 {digest}"
            )
    return Recognition(
        "unsupported",
        target,
        f"source of {module.__name__} unreadable ({why}); the bytecode of {cls.__name__}.{method} "
        f"(Python {python}, code sha256 {digest}) is not a known shape's",
        cls=cls,
    )


def _recognised(module, site, shape, cls, target, evidence) -> Recognition:
    hazard = site.hazard(module) if site.hazard else None
    if hazard:
        return Recognition("unsupported", target, hazard, cls=cls)
    return Recognition(
        "recognised", target, f"{shape.name} ({shape.releases}), {evidence}", shape, cls
    )


def releases_first(method_node: ast.FunctionDef, released=("_buffer",)) -> bool:
    """True when, in source order, every ``self.<attr> = <call>`` of the ``released``
    attributes (or ``= <local>`` of a local last assigned a call) comes after a
    ``self.<attr> = None`` of that attribute (and there is one)."""
    assigns = sorted(
        (n for n in ast.walk(method_node) if isinstance(n, ast.Assign)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    dropped, allocated, fresh = set(), False, set()
    for node in assigns:
        for attr in {_self_attr(t) for t in node.targets} & set(released):
            fresh_local = isinstance(node.value, ast.Name) and node.value.id in fresh
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                dropped.add(attr)
            elif isinstance(node.value, ast.Call) or fresh_local:
                if attr not in dropped:
                    return False
                allocated = True
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        fresh = fresh | names if isinstance(node.value, ast.Call) else fresh - names
    return allocated


def _method_node(tree: ast.Module, class_name: str, method: str) -> "ast.FunctionDef | None":
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item
    return None


def _first_line(node: ast.FunctionDef) -> int:
    return node.decorator_list[0].lineno if node.decorator_list else node.lineno


def _self_attr(target: ast.expr) -> "str | None":
    """``attr`` for a ``self.attr`` target, else None."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return target.attr if target.value.id == "self" else None
    return None


def foreign_hook(live, ours) -> "tuple[str, str] | None":
    """``("wrapped" | "replaced", reason)`` when ``live`` is another hook's function whose
    ``__wrapped__`` chain leads to ``ours``: wrapped when each link holds the next in its
    closure (it can call it: sglang's AROUND, BEFORE, AFTER), replaced when one does not
    (sglang's REPLACE only names the original)."""
    calls, outer = True, live
    for _ in range(100):  # a chain, not a cycle
        inner = getattr(outer, "__wrapped__", None)
        if inner is None or outer is ours:
            return None
        calls = calls and any(_cell(c) is inner for c in getattr(outer, "__closure__", None) or ())
        if inner is ours:
            code = getattr(live, "__code__", None)
            where = (
                f"{code.co_name} in {code.co_filename}:{code.co_firstlineno}"
                if code
                else repr(live)
            )
            if calls:
                return "wrapped", (
                    f"another hook's function ({where}) wraps the overlay's release-first "
                    "method and can call it: release-first runs where that hook calls through"
                )
            return "replaced", (
                f"another hook's function ({where}) names the overlay's release-first method "
                "as __wrapped__ but does not hold it: that hook runs instead, release-first does not"
            )
        outer = inner
    return None


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
