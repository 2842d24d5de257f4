#!/usr/bin/env python3
"""A pre-commit hook: refuse a NEW grow-while-held allocation in the files being committed.

A site the file at ``--base`` (default HEAD) lacks fails; old ones pass. One held on purpose says
why (a marker without a reason fails) on its line or above; exit 0 clean, 1 not::

    # grows-while-held: keeps-old-on-purpose a captured CUDA graph may still read the old one
"""

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as a file by pre-commit: make ``series`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ci import gitcmd  # noqa: E402
from tools.series import audit, audit_expr  # noqa: E402

HOW_TO_FIX = (
    "release the old value first (self.x = None, then allocate), or say why it must stay: "
    "# grows-while-held: keeps-old-on-purpose <reason>"
)


def new_sites(current: "list[audit.Site]", before: "list[audit.Site]") -> "list[audit.Site]":
    """The grows-while-held sites of ``current`` beyond those ``before`` already had."""
    known = Counter((s.qualname, s.target) for s in before if s.verdict == "grows-while-held")
    fresh = []
    for site in (s for s in current if s.verdict == "grows-while-held"):
        if known[site.qualname, site.target]:
            known[site.qualname, site.target] -= 1
        else:
            fresh.append(site)
    return fresh


def check_file(path: str, base_source: "str | None") -> "list[str]":
    """The hook's complaints about one file."""
    try:
        source = audit.read_source(path)
        current = audit.audit_source(source, path)
    except audit.Unreadable as exc:
        return [f"{_inert(path)}: cannot be checked: {exc}"]
    except SyntaxError:
        return []  # not this hook's business: the interpreter and other hooks say it
    try:
        before = audit.audit_source(base_source, path) if base_source else []
    except (SyntaxError, audit.Unreadable):
        before = []
    complaints = [
        f"{_inert(path)}:{s.line}: {s.qualname} allocates the new {s.target} while still holding the "
        f"old one ({s.allocator}; grows with {', '.join(s.grows_with) or 'a fixed size'}): "
        + HOW_TO_FIX
        for s in new_sites(current, before)
    ]
    complaints += [
        f"{_inert(path)}:{number}: a keeps-old-on-purpose marker must say why"
        for number in audit_expr.bare_markers(source)
    ]
    return complaints


def _inert(text: str) -> str:
    """Control and format characters shown as escapes (a file name is anyone's)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def base_source(path: str, rev: str) -> "str | None":
    """The file at ``rev``, or None where there is none."""
    shown = gitcmd.run(["show", f"{rev}:./{path}"], None, check=False)
    if shown.returncode != 0 or len(shown.stdout) > audit.MAX_BYTES:
        return None
    try:
        return audit.decode(shown.stdout)
    except audit.Unreadable:
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="grow_hook.py", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="the changed files (pre-commit passes them)")
    parser.add_argument("--base", default="HEAD", help="the revision to compare with")
    args = parser.parse_args(argv)
    complaints = []
    for path in args.files:
        if path.endswith(".py") and os.path.lexists(path):
            complaints += check_file(path, base_source(path, args.base))
    for line in complaints:
        print(line)
    return 1 if complaints else 0


if __name__ == "__main__":
    sys.exit(main())
