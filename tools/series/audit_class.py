"""What a class's methods say about each other, for the grow-while-held analysis
(``tools/series/audit.py``): which targets a method releases when called, and which methods run
only while the object is built. Pure functions of ``ast`` nodes; stdlib only, like the analysis.
"""

import ast

from tools.series import audit_expr as expr

# Construction, and unittest's per-test set-up (a fresh TestCase instance per test).
INIT_METHODS = frozenset({"__init__", "__post_init__", "__new__", "setUp", "setup_method"})


def released_at_top(func) -> "set[str]":
    """The targets a method releases in its own top-level statements (``self.x = None``,
    ``self.x = []``, ``del self.x``): calling it releases them."""
    roots = {expr.self_name(func): "self"}
    out = set()
    for stmt in func.body:
        if isinstance(stmt, ast.Assign) and (
            expr.is_none(stmt.value) or expr.is_empty_holder(stmt.value)
        ):
            out |= {k for k in (expr.chain(t, roots) for t in stmt.targets) if k}
        elif isinstance(stmt, ast.Delete):
            out |= {k for k in (expr.chain(t, roots) for t in stmt.targets) if k}
    return out


def construction_only(methods: "dict[str, ast.FunctionDef]") -> "set[str]":
    """The methods that run only while the object is built: construction and per-test set-up,
    and any private helper that only such methods call (``methods``: name -> its definition)."""
    callers: dict[str, set[str]] = {name: set() for name in methods}
    for name, func in methods.items():
        self_name = expr.self_name(func)
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == self_name
                and node.attr in callers
                and node.attr != name
            ):
                callers[node.attr].add(name)
    init_only = set(INIT_METHODS) & set(methods)
    changed = True
    while changed:  # a private helper that only init-only methods call
        changed = False
        for name, by in callers.items():
            private = name.startswith("_") and not name.startswith("__")
            if name not in init_only and private and by and by <= init_only:
                init_only.add(name)
                changed = True
    return init_only
