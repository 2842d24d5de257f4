"""Recognise which DSV4 sparse-prefill workspace shape a loaded sglang module has.

The one place that knows where the workspace class lives and what each published release's
allocating method looks like, by the sha256 of its exact source text, or, where only bytecode
is deployed, of its code object (``code_sha256``). Reads source files; never changes anything.
"""

import ast
import hashlib
import inspect
import sys
from dataclasses import dataclass

from sglang_overlay import WORKSPACE_MODULE

WORKSPACE_CLASSES = ("SparsePrefillKVBuffer", "SparsePrefillWorkspace")


@dataclass(frozen=True)
class WorkspaceShape:
    """One published form of the workspace's allocating method."""

    name: str
    class_name: str
    method: str
    source_sha256: str  # first 12 hex digits of the def's exact source text
    releases: str
    # code_sha256 of the method as CPython 3.10, 3.11, 3.12, 3.13 compile that text (the same
    # for 3.11.2 and 3.11.7, 3.12.1 and 3.12.3: it changes with the minor version only)
    code_sha256: "tuple[str, ...]" = ()


KNOWN_SHAPES = (
    WorkspaceShape(
        "workspace-get-bf16",
        "SparsePrefillWorkspace",
        "get",
        "d521f0e4199e",
        "0.5.15-0.5.18",
        code_sha256=("b64061b4e6d9", "5b9fade88fc2", "43bafab7deed", "147d4f608767"),
    ),
    WorkspaceShape(
        "workspace-get-dtype",
        "SparsePrefillWorkspace",
        "get",
        "6e444f7823ac",
        "0.5.19-0.5.22",
        code_sha256=("0912c84244b6", "3cb8b13f2108", "02a282a47edc", "3d94ba3a92c6"),
    ),
    WorkspaceShape(
        "kv-buffer-reserve",
        "SparsePrefillKVBuffer",
        "_reserve",
        "08fa9779e685",
        "0.5.23",
        code_sha256=("dae76ad0319a", "1b62c33967d7", "794386905f04", "473d06d0e8a5"),
    ),
)


@dataclass(frozen=True)
class Recognition:
    """What the overlay found: a known shape, or a state and the reason it is not patchable."""

    state: str  # "recognised", "not-present", "upstream-fixed", "unsupported"
    target: str
    reason: str
    shape: "WorkspaceShape | None" = None
    cls: "type | None" = None


def workspace_class(module) -> "type | None":
    """The workspace class ``module`` defines, under any of its published names."""
    for name in WORKSPACE_CLASSES:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    return None


CODE_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # the order of WorkspaceShape.code_sha256


def code_sha256(code) -> str:
    """A code object's behaviour as this CPython compiled it: bytecode, names, argument
    counts, flags and constants (nested code included); no file name or line numbers."""

    def parts(c):
        consts = tuple(parts(k) if isinstance(k, type(c)) else repr(k) for k in c.co_consts)
        return (
            c.co_code,
            c.co_names,
            c.co_varnames,
            c.co_freevars,
            c.co_cellvars,
            c.co_argcount,
            c.co_posonlyargcount,
            c.co_kwonlyargcount,
            c.co_flags,
            consts,
        )

    return hashlib.sha256(repr(parts(code)).encode()).hexdigest()[:12]


def recognise(module) -> Recognition:
    """Classify the workspace class in an imported workspace module."""
    cls = workspace_class(module)
    if cls is None:
        return Recognition(
            "not-present",
            WORKSPACE_MODULE,
            f"{WORKSPACE_MODULE} defines none of {', '.join(WORKSPACE_CLASSES)}",
        )
    method = "_reserve" if "_reserve" in vars(cls) else "get"
    target = f"{WORKSPACE_MODULE}.{cls.__name__}.{method}"
    func = vars(cls).get(method)
    if func is None or not inspect.isfunction(func):
        return Recognition(
            "unsupported", target, f"{cls.__name__} has no plain {method}() method", cls=cls
        )
    try:
        module_source = inspect.getsource(module)
    except (OSError, TypeError) as exc:
        return _recognise_bytecode(module, cls, method, func, target, exc)
    node = _method_node(ast.parse(module_source), cls.__name__, method)
    if node is None or func.__code__.co_firstlineno != _first_line(node):
        return Recognition(
            "unsupported",
            target,
            f"{cls.__name__}.{method} is not the function defined in {WORKSPACE_MODULE}'s source "
            "(something else already replaced it)",
            cls=cls,
        )
    digest = hashlib.sha256(ast.get_source_segment(module_source, node).encode()).hexdigest()[:12]
    for shape in KNOWN_SHAPES:
        if (shape.class_name, shape.method, shape.source_sha256) == (cls.__name__, method, digest):
            return _recognised(module, shape, cls, target, f"sha256 {digest}")
    if releases_first(node):
        return Recognition(
            "upstream-fixed",
            target,
            f"{cls.__name__}.{method} (sha256 {digest}) already drops the old buffer before allocating",
            cls=cls,
        )
    return Recognition(
        "unsupported",
        target,
        f"unknown source of {cls.__name__}.{method} (sha256 {digest}); known: "
        + ", ".join(f"{s.source_sha256} ({s.releases})" for s in KNOWN_SHAPES),
        cls=cls,
    )


def _recognise_bytecode(module, cls, method, func, target, why) -> Recognition:
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    digest = code_sha256(func.__code__)
    ours = func.__qualname__ == f"{cls.__name__}.{method}" and func.__module__ == module.__name__
    for shape in KNOWN_SHAPES if ours and python in CODE_PYTHONS else ():
        same_method = (shape.class_name, shape.method) == (cls.__name__, method)
        if same_method and shape.code_sha256[CODE_PYTHONS.index(python)] == digest:
            return _recognised(module, shape, cls, target, f"bytecode only, code sha256 {digest}")
    return Recognition(
        "unsupported",
        target,
        f"source of {WORKSPACE_MODULE} unreadable ({why}); the bytecode of {cls.__name__}.{method} "
        f"(Python {python}, code sha256 {digest}) is not a known shape's",
        cls=cls,
    )


def _recognised(module, shape, cls, target, evidence) -> Recognition:
    hazard = _address_keyed_validity(module)
    if hazard:
        return Recognition("unsupported", target, hazard, cls=cls)
    return Recognition(
        "recognised", target, f"{shape.name} ({shape.releases}), {evidence}", shape, cls
    )


def releases_first(method_node: ast.FunctionDef) -> bool:
    """True when the method assigns ``self._buffer = None`` before ``self._buffer = <call>``."""
    released = False
    for node in ast.walk(method_node):
        if not isinstance(node, ast.Assign):
            continue
        if not any(_is_self_buffer(t) for t in node.targets):
            continue
        if isinstance(node.value, ast.Constant) and node.value.value is None:
            released = True
        elif isinstance(node.value, ast.Call):
            return released
    return False


def _address_keyed_validity(module) -> "str | None":
    # An unreleased upstream design (in no release) keys a per-forward gather cache on the
    # workspace's allocation address. Released first, a replacement may get the old address
    # back and a stale key would match, so that code needs the upstream change, not this one.
    gather = getattr(module, "CompressedGather", None)
    fields = getattr(gather, "__dataclass_fields__", {})
    if "dequantized_source" in fields:
        return (
            "CompressedGather.dequantized_source keys prefix validity on the workspace's "
            "allocation address; releasing first could let a replacement reuse that address "
            "and match a stale key"
        )
    return None


def _method_node(tree: ast.Module, class_name: str, method: str) -> "ast.FunctionDef | None":
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item
    return None


def _first_line(node: ast.FunctionDef) -> int:
    return node.decorator_list[0].lineno if node.decorator_list else node.lineno


def _is_self_buffer(target: ast.expr) -> bool:
    return (
        isinstance(target, ast.Attribute)
        and target.attr == "_buffer"
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    )
