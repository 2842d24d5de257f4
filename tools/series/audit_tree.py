"""``python -m tools.series audit TREE``: run the grow-while-held analysis (``tools/series/audit.py``) over an
sglang source tree and render what it found. Reads files only; never imports the tree.

TREE is an upstream checkout (``python/sglang``), an installed package folder (``.../sglang``),
or the folder holding one (site-packages). Files are named from the package down
(``sglang/srt/...``) whichever layout was given, so two trees' results compare line by line.
"""

from pathlib import Path

from tools.series import audit, usage


def package_root(tree: str) -> Path:
    """The ``sglang`` package folder inside TREE, or a usage error naming what is missing."""
    path = Path(tree)
    for candidate in (path, path / "sglang", path / "python" / "sglang"):
        if (candidate / "__init__.py").is_file() and (candidate / "srt").is_dir():
            if candidate.name == "sglang":
                return candidate
    raise usage(
        f"{tree}: not an sglang source tree (no sglang/__init__.py with srt/ in it, "
        "nor python/sglang/)"
    )


def audit_package(root: Path) -> "tuple[list[audit.Site], list[str]]":
    """Every site under the package, and the files that did not parse (with why)."""
    sites, skipped = [], []
    for path in sorted(root.rglob("*.py")):
        name = f"sglang/{path.relative_to(root).as_posix()}"
        try:
            source = path.read_text(encoding="utf-8")
            sites.extend(audit.audit_source(source, name))
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            skipped.append(f"{name}: {type(exc).__name__}: {exc}")
    return sites, skipped


def render_table(sites: "list[audit.Site]") -> str:
    """A Markdown table, grows-while-held first, then the other verdicts, each by file."""
    order = {v: i for i, v in enumerate(audit.VERDICTS)}
    rows = sorted(sites, key=lambda s: (order[s.verdict], s.file, s.line))
    out = [
        "| verdict | file:line | method | target | allocator | grows with | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in rows:
        grows = ", ".join(s.grows_with) or "-"
        out.append(
            f"| {s.verdict} | {s.file}:{s.line} | `{s.qualname}` | `{s.target}` | "
            f"`{s.allocator}` | {grows} | {s.reason} |"
        )
    return "\n".join(out) + "\n"


def summary(sites: "list[audit.Site]") -> str:
    counts = {v: sum(s.verdict == v for s in sites) for v in audit.VERDICTS}
    return f"{len(sites)} sites: " + ", ".join(f"{n} {v}" for v, n in counts.items())
