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


def classify(exact_ok: bool, exact_output: str, fuzz_ok: bool):
    """(status, detail) from the exact and the one-line-of-context git apply --check."""
    if exact_ok:
        offsets = _OFFSET.findall(exact_output)
        detail = ", ".join(f"hunk #{h} offset {int(o):+d}" for h, _, o in offsets)
        return "clean", detail
    if fuzz_ok:
        return "fuzz", "applies with 1 line of context"
    return "fails", ""


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
    """How one patch applies to ``tree``, applying it when it does."""
    exact = _apply(tree, path, ["--check", "-v"])
    fuzzy = exact if exact.returncode == 0 else _apply(tree, path, ["--check", "-v", "-C1"])
    status, detail = classify(exact.returncode == 0, gitcmd.text(exact), fuzzy.returncode == 0)
    if status == "fails":
        problems = check.explain(gitcmd.text(exact), patch)
        detail = "; ".join(problem.split(": ", 1)[1] for problem in problems)
    else:
        _apply(tree, path, [] if status == "clean" else ["-C1"])
    return {"status": status, "detail": detail}


def _apply(tree: Path, patch_path: Path, extra):
    return gitcmd.run(["apply", *extra, str(patch_path)], tree, check=False, ceiling=tree.parent)


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
