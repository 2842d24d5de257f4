"""Every method that allocates a tensor's replacement while still holding it (old + new live at
once), classified; reads source with ``ast``, never imports it; stdlib only (``grow_hook.py``)."""

import ast
import io
import os
import stat
import tokenize
from dataclasses import asdict, dataclass, replace

from tools.series import SeriesError
from tools.series import audit_expr as expr
from tools.series.audit_expr import INIT_METHODS, construction_only, released_at_top

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

    def to_dict(self) -> dict:
        return {**asdict(self), "grows_with": list(self.grows_with)}


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
        if os.path.islink(path):
            raise Unreadable("a link, not followed")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Unreadable("not a regular file")
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise Unreadable(exc.strerror or type(exc).__name__) from None
    if len(data) > MAX_BYTES:
        raise Unreadable(f"over the {MAX_BYTES}-byte bound")
    return decode(data)


@dataclass
class _Path:
    """What holds on the path through a method before the statement being read."""

    released: "set[str]"
    kept: "dict[str, str]"  # key -> where the old value was kept
    once: "set[str]"  # keys only allocated while they hold nothing

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
    def __init__(self, cls: ast.ClassDef, file: str, lines: "list[str]"):
        self.cls, self.file, self.lines = cls, file, lines
        self.methods = {
            f.name: f
            for f in cls.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and expr.self_name(f)
        }
        self.releases_by_method = {n: released_at_top(f) for n, f in self.methods.items()}
        self.init_only = construction_only(self.methods)
        self.escapes: dict[str, list[str]] = {}  # function -> key shapes stored as views

    def sites(self) -> "list[Site]":
        found = [c for name, func in self.methods.items() for c in self._function(func, name)]
        sites, out = [self._classify(c) for c in found], []
        for site, cand in zip(sites, found, strict=True):  # empty_like(self._k) grows as self._k
            roots = {expr.self_name(self.methods[cand.func]): "self"}
            like = (site.qualname, cand.call.args and expr.chain(cand.call.args[0], roots))
            grown = [o.grows_with for o in sites if (o.qualname, o.target) == like and o.grows_with]
            out.append(replace(site, grows_with=site.grows_with or next(iter(grown), ())))
        return out

    def _function(self, func, qual: str) -> "list[_Candidate]":
        self.roots = {expr.self_name(func): "self"}
        self.flags = expr.assigned_keys(func, self.roots, lambda v: getattr(v, "value", 0) is True)
        self.assigned = expr.assigned_keys(func, self.roots)
        self.fresh: dict[str, tuple[ast.Call, _Path, int]] = {}
        self.old_locals: dict[str, str] = {}  # local name -> key whose old value it holds
        self.found: list[_Candidate] = []
        self.qual, self.escapes[qual] = qual, []
        self._block(func.body, _Path(set(), {}, set()))
        for cand in self.found:  # the old value copied into the new one after allocating
            after = cand.stmt.end_lineno or cand.stmt.lineno
            for name, key in self.old_locals.items():
                if key == cand.key and any(
                    isinstance(n, ast.Name)
                    and n.id == name
                    and isinstance(n.ctx, ast.Load)
                    and n.lineno > after
                    for n in ast.walk(func)
                ):
                    cand.path.kept.setdefault(key, f"copies the old value (local '{name}')")
            if cand.alloc_line and self._read_between(func, cand):
                cand.path.kept.setdefault(cand.key, "copies the old value into the new one")
        return self.found

    def _block(self, body, path: _Path) -> _Path:
        for stmt in body:
            path = self._stmt(stmt, path)
        return path

    def _stmt(self, stmt, path: _Path) -> _Path:
        self.line = stmt.lineno
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
        path = path.copy()
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
        for key, on_body in expr.absent_on(stmt.test, self.roots):
            # On that branch the target holds nothing: allocating there replaces nothing, and
            # where the method builds that target, whatever it builds beside it is built once.
            empty = body_path if on_body else else_path
            empty.once.update([key, ALL] if key in self.assigned else [key])
            empty.released.add(key)
        flag = expr.flag_test(stmt.test, self.roots)
        if flag and flag[0] in self.flags:  # if self.ready: return ... self.ready = True
            if not flag[1]:
                body_path.once.add(ALL)
            elif expr.terminates(stmt.body):
                else_path.once.add(ALL)
        body_end = self._block(stmt.body, body_path)
        else_end = self._block(stmt.orelse, else_path)
        if expr.terminates(stmt.body) and not expr.terminates(stmt.orelse):
            return else_end
        if expr.terminates(stmt.orelse) and not expr.terminates(stmt.body):
            return body_end
        # released on both stays released; kept on one and kept or released on the other stays
        # kept (``if self.buf is not None: keep(self.buf)``)
        a, b = body_end, else_end
        kept = {k: why for k, why in a.kept.items() if k in b.kept or k in b.released}
        kept.update({k: why for k, why in b.kept.items() if k in a.released})
        return _Path(a.released & b.released, kept, a.once & b.once)

    def _assign(self, target, value, stmt, path: _Path) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            for i, elt in enumerate(target.elts):
                self._assign(elt, values[i] if values and i < len(values) else None, stmt, path)
            return
        if isinstance(target, ast.Name):
            return self._bind_local(target.id, value, path)
        key = expr.chain(target, self.roots)
        if key is None or value is None or expr.writes_into(target):
            return
        call = expr.allocator(value)
        if isinstance(value, ast.Name) and value.id in self.fresh:
            call, at_alloc, line = self.fresh[value.id]
            self.found.append(_Candidate(key, call, stmt, at_alloc, self.qual, line))
        elif call is not None:
            self.found.append(_Candidate(key, call, stmt, path.copy(), self.qual))
        elif expr.is_none(value) or expr.is_empty_holder(value):
            path.released.add(key)
        else:
            for held in expr.viewed(value, self.roots):
                if expr.shape(held) != expr.shape(key):
                    path.kept[held] = f"kept in {key}"
                    self.escapes[self.qual].append(expr.shape(held))

    def _bind_local(self, name: str, value, path: _Path) -> None:
        self.fresh.pop(name, None)
        self.roots.pop(name, None)
        self.old_locals.pop(name, None)  # from here on the name holds something else
        if value is None:
            return
        call = expr.allocator(value)
        key = expr.chain(value, self.roots) or expr.probe(value, self.roots)
        if call is not None:
            self.fresh[name] = (call, path.copy(), self.line)
        elif key is not None:
            self.roots[name] = key  # an alias: ws = self._workspaces; ws[r] = torch.empty(...)
            self.old_locals[name] = key

    def _call(self, call: ast.Call, path: _Path) -> None:
        func = call.func
        if not isinstance(func, ast.Attribute):
            return
        receiver = expr.chain(func.value, self.roots)
        if receiver and func.attr in {"append", "extend", "add", "insert", "appendleft"}:
            for arg in call.args:
                for held in expr.viewed(arg, self.roots):
                    path.kept[held] = f"kept in {receiver}"
                    self.escapes[self.qual].append(expr.shape(held))
        elif receiver and func.attr == "clear":
            path.released.add(receiver)
        elif receiver and func.attr == "pop" and call.args:
            path.released.add(f"{receiver}[{expr.slice_text(call.args[0])}]")
        elif receiver == "self" and func.attr in self.releases_by_method:
            path.released |= self.releases_by_method[func.attr]

    def _read_between(self, func, cand: _Candidate) -> bool:
        """``new = torch.zeros(...); new[:n] = self.buf; self.buf = new``: the old value is
        read after the allocation and before the replacement."""
        roots = {expr.self_name(func): "self"}
        metadata = {  # self.buf.shape, self.buf.dtype: read about it, not from it
            id(n.value)
            for n in ast.walk(func)
            if isinstance(n, ast.Attribute) and n.attr not in expr.VIEW_METHODS
        }
        return any(
            isinstance(n, (ast.Attribute, ast.Subscript))
            and isinstance(n.ctx, ast.Load)
            and id(n) not in metadata
            and cand.alloc_line < n.lineno < cand.stmt.lineno
            and expr.holds(expr.chain(n, roots) or "", cand.key)
            for n in ast.walk(func)
        )

    def _classify(self, cand: _Candidate) -> Site:
        verdict, reason = self._verdict(cand)
        attr, keywords = cand.call.func.attr, cand.call.keywords
        return Site(
            self.file,
            f"{self.cls.name}.{cand.func}",
            cand.stmt.lineno,
            cand.key,
            f".{attr}" if attr in expr.NEW_METHODS else f"torch.{attr}",
            verdict,
            expr.grows_with(cand.call, self.methods[cand.func]),
            reason,
            next((ast.unparse(k.value) for k in keywords if k.arg == "dtype"), ""),
        )

    def _verdict(self, cand: _Candidate) -> "tuple[str, str]":
        stmt, key, path = cand.stmt, cand.key, cand.path
        if marker := self._marker(stmt):
            return "keeps-old-on-purpose", f"marked: {marker}"
        if cand.func in INIT_METHODS:
            return "init-only", f"in {cand.func}"
        if cand.func in self.init_only:
            return "init-only", f"{cand.func} is only called from construction"
        if ALL in path.once:
            return "init-only", "built once: behind a flag or a target the method sets"
        if any(expr.covers(k, key) for k in path.once):
            return "init-only", "built once: only while it holds nothing"
        if kept := [why for k, why in path.kept.items() if expr.holds(k, key)]:
            return "keeps-old-on-purpose", kept[0]
        escaped = self.escapes.items()
        if holders := [
            q for q, held in escaped if q != cand.func and any(expr.holds(h, key) for h in held)
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
