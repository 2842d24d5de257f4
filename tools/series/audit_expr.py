"""The grow-while-held audit's vocabulary (pure, stdlib only): an allocation is ``torch.X(...)``
or ``t.new_X(...)``, also at a chain's root; never a copy of the old value (``.to``, ``.clone``,
``torch.cat``: both live anyway) nor ``torch.tensor`` (host data)."""

import ast
import io
import re
import tokenize
import unicodedata

TORCH_ALLOCATORS = frozenset(
    "empty zeros ones full empty_like zeros_like ones_like full_like empty_strided "
    "rand randn randint arange".split()
)
NEW_METHODS = frozenset("new_empty new_zeros new_ones new_full new_empty_strided".split())
# Words of the size expression's names (split at "_") -> what the size grows with.
GROWS_WITH_WORDS = {
    "tokens": {"token", "tokens", "tok", "ntok", "ntokens", "row", "rows"},
    "context": {"seq", "seqs", "seqlen", "seqlens", "context", "ctx", "prefix", "page", "pages"},
    "batch": {"batch", "bs", "bsz", "req", "reqs", "request", "requests"},
    "capacity": {"capacity", "cap"},
}
VIEW_METHODS = frozenset(
    "view view_as reshape narrow select unflatten flatten as_strided permute transpose t "
    "unsqueeze squeeze expand expand_as split chunk unbind detach contiguous".split()
)
# A target set to one of these holds nothing.
EMPTY = frozenset("None {} [] () dict() list() set() tuple()".split())
# Construction, and unittest's per-test set-up (a fresh TestCase instance per test).
INIT_METHODS = frozenset({"__init__", "__post_init__", "__new__", "setUp", "setup_method"})


def chain(node, roots: dict) -> "str | None":
    """``self.a[k].b`` -> "self.a[k].b" when the chain starts at a root (self or an alias)."""
    root = node
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if isinstance(root, ast.Name) and root.id in roots:
        return roots[root.id] + ast.unparse(node)[len(root.id) :]
    return None


def slot(base: "str | None", index) -> "str | None":
    """``self.d`` and ``k`` -> "self.d[k]", written as ``chain`` writes it."""
    return base and ast.unparse(ast.Subscript(ast.Name(base), index))


def shape(key: str) -> str:
    """A key with its subscripts blanked: ``self.ws[ratio]`` and ``self.ws[1]`` share a slot."""
    return re.sub(r"\[[^\]]*\]", "[]", key)


def covers(released: str, key: str) -> bool:
    """Releasing ``self.d`` (or ``self.d[k]``) releases the slot ``self.d[k]``."""
    return shape(key) == shape(released) or key.startswith((released + ".", released + "["))


def holds(held: str, key: str) -> bool:
    """Keeping ``self.buf`` or a slice of it keeps the old ``self.buf``; keeping the container of
    a slot does not keep the slot's old value."""
    return shape(held) == shape(key) or shape(held).startswith(shape(key) + "[")


def writes_into(target) -> bool:
    """``self.buf[:n] = torch.arange(n)`` copies into the existing tensor: no replacement."""
    if not isinstance(target, ast.Subscript):
        return False
    parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
    return any(isinstance(p, ast.Slice) or ast.unparse(p) == "..." for p in parts)


def allocator(value) -> "ast.Call | None":
    """The allocating call at the root of ``value``, if it is a fresh tensor."""
    if isinstance(value, ast.IfExp):
        return allocator(value.body) or allocator(value.orelse)
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        func = value.func
        if func.attr in NEW_METHODS:
            return value
        if isinstance(func.value, ast.Name) and func.value.id == "torch":
            return value if func.attr in TORCH_ALLOCATORS else None
        value = func.value  # torch.empty(...).to(dev): look at the root of the chain
    return None


def grows_with(call: ast.Call, func) -> "tuple[str, ...]":
    """The words of the names in the call's size, followed through the method's locals
    (``new_capacity = max(1, total_ctx)``) -> what the size grows with."""
    assigned: dict[str, list] = {}
    for node in ast.walk(func):
        for t in node.targets if isinstance(node, ast.Assign) else ():
            if isinstance(t, ast.Name):
                assigned.setdefault(t.id, []).append(node.value)
    todo, seen = [*call.args, *(k.value for k in call.keywords if k.arg == "size")], set()
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, (ast.Name, ast.Attribute)):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name not in seen:
                    seen.add(name)
                    todo += assigned.get(name, [])
    words = {w for n in seen for w in n.lower().split("_")}
    return tuple(kind for kind, vocab in GROWS_WITH_WORDS.items() if words & vocab)


def viewed(expr, roots: dict):
    """Keys whose storage ``expr`` keeps alive: the value, a slice or view of it, or a holder
    built from those."""
    key = chain(expr, roots)
    if key:
        yield key
    elif isinstance(expr, (ast.Subscript, ast.Starred)):
        yield from viewed(expr.value, roots)
    elif isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        for elt in expr.elts:
            yield from viewed(elt, roots)
    elif isinstance(expr, ast.IfExp):
        yield from viewed(expr.body, roots)
        yield from viewed(expr.orelse, roots)
    elif isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in VIEW_METHODS:
            yield from viewed(func.value, roots)
        elif isinstance(func, ast.Name) and (func.id[:1].isupper() or func.id in {"tuple", "dict"}):
            for arg in [*expr.args, *(k.value for k in expr.keywords)]:
                yield from viewed(arg, roots)


def empty_on(test, roots: dict) -> "list[tuple[str, bool]]":
    """(key, on_body) for each target the test proves empty on one branch: None (``self.x is
    None``), absent (``k not in self.d`` for the slot ``self.d[k]``, ``not hasattr(self, "x")``)
    or false (``not self.ready``, ``getattr(self, "ready", False)``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return [(key, not on_body) for key, on_body in empty_on(test.operand, roots)]
    if isinstance(test, ast.BoolOp):  # and: what holds in the body; or: what holds in the else
        wanted = isinstance(test.op, ast.And)
        return [found for v in test.values for found in empty_on(v, roots) if found[1] == wanted]
    key = None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and is_none(right):
            key, on_body = chain(test.left, roots), isinstance(op, ast.Is)
        elif isinstance(op, (ast.In, ast.NotIn)):
            key, on_body = slot(chain(right, roots), test.left), isinstance(op, ast.NotIn)
    elif isinstance(test, ast.Attribute):
        key, on_body = chain(test, roots), False
    elif isinstance(test, ast.Call):
        key, on_body = by_name(test, roots, "hasattr", "getattr"), False
    return [(key, on_body)] if key else []


def assigned_keys(func, roots: dict) -> "set[str]":
    """Every self-rooted target the function sets to something other than None."""
    return {
        key
        for node in ast.walk(func)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None
        and not is_none(node.value)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for key in [chain(target, roots)]
        if key
    }


def probe(value, roots: dict) -> "str | None":
    """``self.d.get(k)`` -> "self.d[k]", ``getattr(self, "x", None)`` -> "self.x"."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == "get" and len(value.args) <= 2:
        return slot(chain(func.value, roots), value.args[0])
    return by_name(value, roots, "getattr")


def by_name(call, roots: dict, *functions: str) -> "str | None":
    """``getattr(self, "x", ...)`` or ``hasattr(self, "x")`` (one of ``functions``) -> "self.x"."""
    if isinstance(call, ast.Call) and getattr(call.func, "id", None) in functions:
        if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
            base = chain(call.args[0], roots)
            return base and f"{base}.{call.args[1].value}"
    return None


def is_none(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def terminates(body) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def self_name(func) -> "str | None":
    args = func.args.posonlyargs + func.args.args
    static = any(getattr(d, "id", None) == "staticmethod" for d in func.decorator_list)
    return args[0].arg if args and not static else None


def released_at_top(func) -> "set[str]":
    """The targets a method releases in its top-level statements (``self.x = None``, ``= []``,
    ``del self.x``): calling it releases them."""
    roots = {self_name(func): "self"}
    return {
        key
        for stmt in func.body
        if isinstance(stmt, ast.Delete)
        or isinstance(stmt, ast.Assign)
        and ast.unparse(stmt.value) in EMPTY
        for key in (chain(t, roots) for t in stmt.targets)
        if key
    }


def construction_only(methods: "dict[str, ast.FunctionDef]") -> "set[str]":
    """Construction and per-test set-up, and the private helpers only those call."""
    callers: dict[str, set[str]] = {name: set() for name in methods}
    for name, func in methods.items():
        me = self_name(func)
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == me
                and node.attr in callers
                and node.attr != name
            ):
                callers[node.attr].add(name)
    init_only = set(INIT_METHODS) & set(methods)
    private = {
        n for n, by in callers.items() if n.startswith("_") and not n.startswith("__") and by
    }
    while more := {n for n in private - init_only if callers[n] <= init_only}:
        init_only |= more  # a private helper that only init-only methods call
    return init_only


MARKER = re.compile(r"#\s*grows-while-held:\s*keeps-old-on-purpose\b[ \t:,-]*(?P<reason>.*)")


def comments(source: str) -> "dict[int, tuple[str, bool]]":
    """Each line's comment (``tokenize``'s: never a string's text) and whether it is alone."""
    found = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = (tok.string, not tok.line[: tok.start[1]].strip())
    except (tokenize.TokenError, SyntaxError):
        pass  # what was read so far stands; a marker beyond it exempts nothing
    return found


def marker_reason(comment: str) -> "str | None":
    """A marker's reason: None without a marker, "" when it has no visible character."""
    match = MARKER.search(comment)
    if match is None:
        return None
    visible = any(unicodedata.category(ch)[0] in "LNPS" for ch in match.group("reason"))
    return match.group("reason").strip() if visible else ""


def bare_markers(source: str) -> "list[int]":
    """The lines whose comment is a marker without a visible reason (the hook refuses them)."""
    return sorted(n for n, (text, _) in comments(source).items() if marker_reason(text) == "")
