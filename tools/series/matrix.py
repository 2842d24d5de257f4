"""``matrix``: how each patch applies (``git apply``, each fix on its own copy of the wheel's
files) to each DSV4 release: ``clean``, ``fuzz`` (only with one line of context) or ``fails``."""

import re
import tempfile
import zipfile
from pathlib import Path

from ci import gitcmd
from tools.series import base, check

# Releases that ship the DSV4 sparse-prefill workspace (see shared/reference/upstream.md).
DSV4_RELEASES = tuple(
    "0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23".split()
)
_OFFSET = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", re.M)


def release_row(series, version: str) -> dict:
    results = {}
    with zipfile.ZipFile(base.wheel_path(version)) as wheel, tempfile.TemporaryDirectory() as tmp:
        members = set(wheel.namelist())  # upstream's python/sglang/ is sglang/ in the wheel
        for fix in series.fixes:
            tree = Path(tmp) / fix.number / "tree"
            tree.mkdir(parents=True)
            for path, added in fix.touched_files().items():
                if not added and (member := path.removeprefix("python/")) in members:
                    (tree / path).parent.mkdir(parents=True, exist_ok=True)
                    (tree / path).write_bytes(wheel.read(member))
            for patch in fix.patches:
                results[patch.name] = _try(tree, series.root / patch.name, patch)
    return {"version": version, "patches": results}


def _try(tree: Path, path: Path, patch) -> dict:
    """How one patch applies to ``tree``, applying it when it does (git apply: all or nothing)."""

    def apply(option: str):
        return gitcmd.run(["apply", option, str(path)], tree, check=False, ceiling=tree.parent)

    exact = apply("-v")
    if exact.returncode == 0:
        offsets = _OFFSET.findall(gitcmd.text(exact))
        detail = ", ".join(f"hunk #{h} offset {int(o):+d}" for h, _, o in offsets)
        return {"status": "clean", "detail": detail}
    if apply("-C1").returncode == 0:
        return {"status": "fuzz", "detail": "applies with 1 line of context"}
    problems = check.explain(gitcmd.text(exact), patch)
    return {"status": "fails", "detail": "; ".join(p.split(": ", 1)[1] for p in problems)}


def short_detail(detail: str) -> str:
    """File base names, and no 'does not apply' (the status says so)."""
    parts = []
    for part in detail.split("; "):
        path, _, rest = part.partition(": ")
        if rest:
            rest = re.sub(r" @@ [^@]*@@.*? does not apply$", "", rest)
            part = f"{path.rsplit('/', 1)[-1]} {rest.replace(' does not apply', '')}"
        parts.append(part)
    return "; ".join(parts)


def cell(result: dict) -> str:
    detail = short_detail(result["detail"])
    return result["status"] + (f" ({detail})" if detail else "")


def render_table(names, rows) -> str:
    """A markdown table: one row per release, one column per patch."""
    header = ["sglang"] + [name.split("-", 1)[0] for name in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["version"], *(cell(row["patches"][name]) for name in names)]
        lines.append("| " + " | ".join(cells) + " |")
    legend = [f"{name.split('-', 1)[0]}: {name}" for name in names]
    return "\n".join(lines + [""] + legend) + "\n"
