"""``audit TREE``: the audit over an sglang checkout or package folder, files named from the
package down (``sglang/srt/...``) whichever layout, so two trees compare line by line."""

import os
from pathlib import Path

from ci.reporter.escape import printable  # a file name is anyone's: shown, not obeyed
from tools.series import audit, usage


def package_root(tree: str) -> Path:
    path = Path(tree)
    for candidate in (path, path / "sglang", path / "python" / "sglang"):
        has_srt = (candidate / "__init__.py").is_file() and (candidate / "srt").is_dir()
        if has_srt and candidate.name == "sglang":
            return candidate
    raise usage(
        f"{tree}: not an sglang source tree (no sglang/__init__.py with srt/ in it, "
        "nor python/sglang/)"
    )


def audit_package(root: Path) -> "tuple[list[audit.Site], list[str]]":
    """Every site under the package, and one line for each file or folder that could not be read."""
    sites, skipped = [], []

    def unlisted(exc: OSError) -> None:
        shown = Path(exc.filename).relative_to(root).as_posix()
        skipped.append(f"sglang/{printable(shown)}: cannot list: {exc.strerror}")

    walk = os.walk(root, onerror=unlisted)  # never through a link
    for path in sorted(Path(top, f) for top, _, files in walk for f in files if f.endswith(".py")):
        name = f"sglang/{path.relative_to(root).as_posix()}"
        try:
            sites.extend(audit.audit_source(audit.read_source(path), name))
        except audit.Unreadable as exc:
            skipped.append(f"{printable(name)}: {exc}")
        except (SyntaxError, ValueError) as exc:
            skipped.append(f"{printable(name)}: {type(exc).__name__}: {printable(str(exc))}")
    return sites, skipped


def render(sites: "list[audit.Site]") -> str:
    """A Markdown table, in the order of ``audit.VERDICTS``, each by file; then the counts."""
    rows = sorted(sites, key=lambda s: (audit.VERDICTS.index(s.verdict), s.file, s.line))
    counts = {v: sum(s.verdict == v for s in sites) for v in audit.VERDICTS}
    out = [
        "| verdict | file:line | method | target | allocator | grows with | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {s.verdict} | {s.file}:{s.line} | `{s.qualname}` | `{s.target}` | "
            f"`{s.allocator}` | {', '.join(s.grows_with) or '-'} | {s.reason} |"
            for s in rows
        ),
        "",
        f"{len(sites)} sites: " + ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]
    return "\n".join(out) + "\n"
