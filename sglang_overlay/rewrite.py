"""The generic release-first fix: the recognised method's own source, with each released
attribute (and the local that still holds its old value) set to None right before its
replacement is allocated.

Sites of the local-variable form (``buf = self.x; if ...: buf = torch.zeros(...);
self.x = buf``) need nothing else: ``release_first.build`` uses this for every shape that has
no hand-written builder, so a new fix of that form is a ``sites.Site`` and its shapes only.
The source is the one ``shapes.recognise`` hashed (exact text, so the rewrite is the same
every time); it is compiled in the module's globals with the module's file name and line
numbers. Reads source; imports nothing of sglang.
"""

import __future__

import ast
import copy
import inspect

from sglang_overlay import OverlayError, shapes


class RewriteError(OverlayError):
    """The method does not have the form this rewrite knows; nothing was patched."""


def released_method(module, class_name: str, method: str, released) -> "object":
    """``class_name.method`` of ``module`` with the ``released`` attributes dropped first."""
    node = shapes._method_node(shapes.module_tree(inspect.getsource(module)), class_name, method)
    if node is None:
        raise RewriteError(f"{module.__name__} defines no {class_name}.{method}")
    node = copy.deepcopy(node)
    _refuse_class_scoped(node, class_name, method)
    dropped = [attr for attr in released if _drop_before_allocation(node, attr)]
    if not dropped or not shapes.releases_first(node, tuple(dropped)):
        raise RewriteError(
            f"{class_name}.{method}: no allocation of {', '.join(released)} to drop first"
        )
    node.decorator_list = []
    tree = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    # Annotations stay strings: names imported only under TYPE_CHECKING must not be looked up.
    flags = __future__.annotations.compiler_flag
    code = compile(tree, inspect.getsourcefile(module), "exec", flags=flags, dont_inherit=True)
    namespace = {}
    exec(code, vars(module), namespace)  # the def only: the module's globals, as the original's
    return namespace[method]


def _refuse_class_scoped(node, class_name, method) -> None:
    # Compiled outside its class, the method would lose zero-argument super() (no __class__
    # cell) and private-name mangling: refuse rather than change what it does.
    for sub in ast.walk(node):
        name = sub.attr if isinstance(sub, ast.Attribute) else getattr(sub, "id", None)
        call_super = isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "super"
        mangled = isinstance(name, str) and name.startswith("__") and not name.endswith("__")
        if (call_super and not sub.args) or mangled:
            raise RewriteError(f"{class_name}.{method} uses super() or a private name")
    if node.decorator_list:
        raise RewriteError(f"{class_name}.{method} is decorated")


def _drop_before_allocation(node, attr: str) -> bool:
    """Insert ``self.<attr> = <local> = None`` before the statement that allocates what
    ``self.<attr> = <local>`` stores (or ``self.<attr> = None`` before ``self.<attr> = <call>``),
    in every statement list of ``node``. True when one was inserted."""
    done = False
    for body in list(_statement_lists(node)):
        inserts = []  # (position, statement), made after the scan so no index shifts under it
        for index, stmt in enumerate(body):
            if not _stores(stmt, attr):
                continue
            if isinstance(stmt.value, ast.Call):
                inserts.append((index, _none_assign(stmt, attr, None)))
            elif isinstance(stmt.value, ast.Name):
                local = stmt.value.id
                at = next((i for i in range(index - 1, -1, -1) if _assigns(body[i], local)), None)
                if at is not None and _allocates(body[at].value):
                    inserts.append((at, _none_assign(body[at], attr, local)))
        for position, statement in sorted(inserts, key=lambda item: -item[0]):
            body.insert(position, statement)
        done = done or bool(inserts)
    return done


def _statement_lists(node):
    for sub in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(sub, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def _stores(stmt, attr) -> bool:
    return isinstance(stmt, ast.Assign) and any(shapes._self_attr(t) == attr for t in stmt.targets)


def _assigns(stmt, local) -> bool:
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == local for t in stmt.targets
    )


def _allocates(value) -> bool:
    """A call, or a tuple of calls (several buffers kept together)."""
    if isinstance(value, ast.Tuple):
        return bool(value.elts) and all(isinstance(e, ast.Call) for e in value.elts)
    return isinstance(value, ast.Call)


def _none_assign(where, attr, local):
    targets = [ast.Attribute(value=ast.Name(id="self", ctx=ast.Load()), attr=attr, ctx=ast.Store())]
    if local is not None:
        targets.append(ast.Name(id=local, ctx=ast.Store()))
    return ast.copy_location(ast.Assign(targets=targets, value=ast.Constant(value=None)), where)
