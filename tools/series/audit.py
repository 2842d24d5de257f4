"""Every method that allocates a tensor's replacement while still holding it (old + new live at
once), classified; reads source with ``ast``, never imports it; stdlib only (``grow_hook.py``)."""

import ast
import io
import os
import stat
import tokenize
from dataclasses import dataclass, field

from tools.series import SeriesError
from tools.series import audit_expr as expr

ALL = "*"  # in _Path.once: everything on this path is built once
VERDICTS = tuple(
    "grows-while-held releases-first keeps-old-on-purpose views-escape init-only".split()
)


@dataclass(frozen=True)
class Site:
    file: str
    qualname: str
    line: int
    target: str  # normalised: the first parameter is always called "self"
    allocator: str
    verdict: str
    grows_with: "tuple[str, ...]"
    reason: str
    dtype: str = ""  # the call's dtype=; "" when inherited or the default


def audit_source(source: str, file: str) -> "list[Site]":
    """Every site in one module's source (SyntaxError propagates; too deep: ``Unreadable``)."""
    try:
        tree, lines, sites = ast.parse(source), expr.comments(source), []
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                sites.extend(_ClassAudit(node, file, lines).sites())
    except (RecursionError, MemoryError) as exc:
        raise Unreadable(f"nested too deep to analyse ({type(exc).__name__})") from None
    return sorted(sites, key=lambda s: s.line)


MAX_BYTES = 4 * 1024 * 1024  # the largest module read: sglang's biggest is under 300 kB


class Unreadable(SeriesError):
    """A file the audit cannot read or analyse; the message says why in one line."""


def decode(data: bytes) -> str:
    """Source bytes as text, as a PEP 263 coding line or a BOM says."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise Unreadable(f"cannot decode: {exc}") from None


def read_source(path: "str | os.PathLike") -> str:
    """A module's text from a regular file (no link) of at most ``MAX_BYTES``, else Unreadable."""
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            raise Unreadable("a link, not followed")
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("not a regular file")
        if info.st_size > MAX_BYTES:
            raise Unreadable(f"over the {MAX_BYTES}-byte bound")
        with open(path, "rb") as file:
            return decode(file.read())
    except OSError as exc:
        raise Unreadable(exc.strerror or type(exc).__name__) from None


@dataclass
class _Path:
    """What holds on the path through a method before the statement being read."""

    released: "set[str]" = field(default_factory=set)
    kept: "dict[str, str]" = field(default_factory=dict)  # key -> where the old value was kept
    once: "set[str]" = field(default_factory=set)  # keys only allocated while they hold nothing

    def copy(self) -> "_Path":
        return _Path(set(self.released), dict(self.kept), set(self.once))


@dataclass
class _Candidate:
    key: str
    call: ast.Call
    stmt: ast.stmt
    path: _Path
    func: str
    alloc_line: "int | None" = None  # where a local got the allocation, when not at stmt


class _ClassAudit:
    def __init__(self, cls: ast.ClassDef, file: str, lines: "dict[int, tuple[str, bool]]"):
        self.cls, self.file, self.lines = cls, file, lines
        self.methods = {
            f.name: f
            for f in cls.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and expr.self_name(f)
        }
        self.releases_by_method = {n: expr.released_at_top(f) for n, f in self.methods.items()}
        self.init_only = expr.construction_only(self.methods)
        self.escapes: dict[str, list[str]] = {}  # method -> the keys it stores views of
        self.found: list[_Candidate] = []

    def sites(self) -> "list[Site]":
        for qual, func in self.methods.items():
            self.roots = {expr.self_name(func): "self"}  # and each local alias of a target
            self.assigned = expr.assigned_keys(func, self.roots)
            self.fresh: dict[str, tuple[ast.Call, _Path, int]] = {}  # local -> its allocation
            self.qual, self.escapes[qual], first = qual, [], len(self.found)
            self._block(func.body, _Path())
            for cand in self.found[first:]:
                if self._copies_old(func, cand):
                    cand.path.kept.setdefault(cand.key, "copies the old value into the new one")
        return [self._classify(cand) for cand in self.found]

    def _copies_old(self, func, cand: _Candidate) -> bool:
        """Whether the old value is read, beyond its metadata, after the new one's allocation: by a
        local alias, or by the target before its store (``new[:n] = self.buf; self.buf = new``)."""
        start = cand.alloc_line or cand.stmt.end_lineno or cand.stmt.lineno
        aliases = {name for name, key in self.roots.items() if key == cand.key}
        roots = {expr.self_name(func): "self"}
        metadata = {  # self.buf.shape, self.buf.dtype: read about it, not from it
            id(n.value)
            for n in ast.walk(func)
            if isinstance(n, ast.Attribute) and n.attr not in expr.VIEW_METHODS
        }
        return any(
            isinstance(getattr(n, "ctx", None), ast.Load)
            and id(n) not in metadata
            and n.lineno > start
            and (
                getattr(n, "id", None) in aliases
                or (
                    n.lineno < cand.stmt.lineno and expr.holds(expr.chain(n, roots) or "", cand.key)
                )
            )
            for n in ast.walk(func)
        )

    def _block(self, body, path: _Path) -> _Path:
        for stmt in body:
            path = self._stmt(stmt, path)
        return path

    def _stmt(self, stmt, path: _Path) -> _Path:
        """The path after the statement (``path`` itself, changed, for a simple one)."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return path  # nested scopes run at another time
        if isinstance(stmt, ast.If):
            return self._if(stmt, path)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._block(stmt.body, path)
        if type(stmt).__name__ in ("For", "AsyncFor", "While", "Try", "TryStar", "Match"):
            # each branch may not run: what it does holds only inside it; a finally always runs
            for block in [
                getattr(stmt, "body", []),
                *(h.body for h in getattr(stmt, "handlers", [])),
                getattr(stmt, "orelse", []),
                *(c.body for c in getattr(stmt, "cases", [])),
            ]:
                self._block(block, path.copy())
            return self._block(getattr(stmt, "finalbody", []), path)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            for target in getattr(stmt, "targets", None) or [stmt.target]:
                self._assign(target, stmt.value, stmt, path)
        elif isinstance(stmt, ast.Delete):
            path.released |= {k for k in (expr.chain(t, self.roots) for t in stmt.targets) if k}
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self._call(stmt.value, path)
        return path

    def _if(self, stmt: ast.If, path: _Path) -> _Path:
        body_path, else_path = path.copy(), path.copy()
        for key, on_body in expr.empty_on(stmt.test, self.roots):
            # there the target holds nothing: allocating it replaces nothing, and if the method
            # sets it (``self._ready = True``), all it builds there is built once
            empty = body_path if on_body else else_path
            empty.once.update([key, ALL] if key in self.assigned else [key])
            empty.released.add(key)
        body_end = self._block(stmt.body, body_path)
        else_end = self._block(stmt.orelse, else_path)
        body_stops, else_stops = expr.terminates(stmt.body), expr.terminates(stmt.orelse)
        if body_stops != else_stops:  # only the other branch goes on
            return else_end if body_stops else body_end
        # released on both stays released; kept on one and kept or released on the other stays
        # kept (``if self.buf is not None: keep(self.buf)``)
        a, b = body_end, else_end
        kept = {k: why for k, why in a.kept.items() if k in b.kept or k in b.released}
        kept.update({k: why for k, why in b.kept.items() if k in a.released})
        return _Path(a.released & b.released, kept, a.once & b.once)

    def _assign(self, target, value, stmt, path: _Path) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else []
            for i, elt in enumerate(target.elts):
                self._assign(elt, values[i] if i < len(values) else None, stmt, path)
            return
        if isinstance(target, ast.Name):
            return self._bind_local(target.id, value, stmt, path)
        key = expr.chain(target, self.roots)
        if key is None or value is None or expr.writes_into(target):
            return
        call = expr.allocator(value)
        if isinstance(value, ast.Name) and value.id in self.fresh:
            call, at_alloc, line = self.fresh[value.id]
            self.found.append(_Candidate(key, call, stmt, at_alloc, self.qual, line))
        elif call is not None:
            self.found.append(_Candidate(key, call, stmt, path.copy(), self.qual))
        elif ast.unparse(value) in expr.EMPTY:
            path.released.add(key)
        else:
            for held in expr.viewed(value, self.roots):
                if expr.shape(held) != expr.shape(key):
                    path.kept[held] = f"kept in {key}"
                    self.escapes[self.qual].append(held)

    def _bind_local(self, name: str, value, stmt, path: _Path) -> None:
        self.fresh.pop(name, None)
        self.roots.pop(name, None)  # from here on the name holds something else
        if value is None:
            return
        call = expr.allocator(value)
        key = expr.chain(value, self.roots) or expr.probe(value, self.roots)
        if call is not None:
            self.fresh[name] = (call, path.copy(), stmt.lineno)
        elif key is not None:
            self.roots[name] = key  # an alias: ws = self._workspaces; ws[r] = torch.empty(...)

    def _call(self, call: ast.Call, path: _Path) -> None:
        func = call.func
        receiver = isinstance(func, ast.Attribute) and expr.chain(func.value, self.roots)
        if receiver and func.attr in {"append", "extend", "add", "insert", "appendleft"}:
            for arg in call.args:
                for held in expr.viewed(arg, self.roots):
                    path.kept[held] = f"kept in {receiver}"
                    self.escapes[self.qual].append(held)
        elif receiver and func.attr == "clear":
            path.released.add(receiver)
        elif receiver and func.attr == "pop" and call.args:
            path.released.add(expr.slot(receiver, call.args[0]))
        elif receiver == "self" and func.attr in self.releases_by_method:
            path.released |= self.releases_by_method[func.attr]

    def _classify(self, cand: _Candidate) -> Site:
        verdict, reason = self._verdict(cand)
        func, attr = self.methods[cand.func], cand.call.func.attr
        # empty_like(self._k) grows as the self._k the method allocates
        like = cand.call.args and expr.chain(cand.call.args[0], {expr.self_name(func): "self"})
        sized = [o.call for o in self.found if (o.func, o.key) == (cand.func, like)]
        grows = (expr.grows_with(call, func) for call in [cand.call, *sized])
        return Site(
            self.file,
            f"{self.cls.name}.{cand.func}",
            cand.stmt.lineno,
            cand.key,
            f".{attr}" if attr in expr.NEW_METHODS else f"torch.{attr}",
            verdict,
            next(filter(None, grows), ()),
            reason,
            next((ast.unparse(k.value) for k in cand.call.keywords if k.arg == "dtype"), ""),
        )

    def _verdict(self, cand: _Candidate) -> "tuple[str, str]":
        stmt, key, path = cand.stmt, cand.key, cand.path
        if marker := self._marker(stmt):
            return "keeps-old-on-purpose", f"marked: {marker}"
        if cand.func in expr.INIT_METHODS:
            return "init-only", f"in {cand.func}"
        if cand.func in self.init_only:
            return "init-only", f"{cand.func} is only called from construction"
        if ALL in path.once:
            return "init-only", "built once: behind a flag or a target the method sets"
        if any(expr.covers(k, key) for k in path.once):
            return "init-only", "built once: only while it holds nothing"
        if kept := [why for k, why in path.kept.items() if expr.holds(k, key)]:
            return "keeps-old-on-purpose", kept[0]
        if holders := [
            q
            for q, held in self.escapes.items()
            if q != cand.func and any(expr.holds(h, key) for h in held)
        ]:
            named = ", ".join(f"{self.cls.name}.{q}" for q in sorted(holders))
            return "views-escape", f"{named} keeps a view of it"
        if released := [k for k in path.released if expr.covers(k, key)]:
            return "releases-first", f"{released[0]} released before allocating"
        return "grows-while-held", "the old value is referenced while the new one is allocated"

    def _marker(self, stmt) -> "str | None":
        """The reason of a marker on the statement's lines or the comment-only lines right above
        (a comment trailing another statement marks that statement only)."""
        first, top = stmt.lineno, stmt.lineno
        while top - 1 in self.lines and self.lines[top - 1][1]:  # comment-only lines above
            top -= 1
        numbers = [*range(first, (stmt.end_lineno or first) + 1), *range(first - 1, top - 1, -1)]
        reasons = (expr.marker_reason(self.lines.get(n, ("", False))[0]) for n in numbers)
        return next(filter(None, reasons), None)
