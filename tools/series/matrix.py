"""``matrix``: how each patch applies to each sglang release with the DSV4 workspace: for each fix
(``seriesdir.Fix``) on its own, the files it touches, out of each cached wheel, get its patches
in order with ``git apply`` (``clean``, ``fuzz``: only with one line of context, or ``fails``);
one that applies is kept. Fixes are independent, so one that fails never decides another's.
"""

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
    wheel = zipfile.ZipFile(base.wheel_path(version))
    names = set(wheel.namelist())

    def read(path):  # upstream's python/sglang/ is sglang/ in the wheel
        member = path.removeprefix("python/")
        return wheel.read(member) if member in names else None

    with wheel:
        return {"version": version, "patches": _row(series, read)}


def _row(series, read) -> dict:
    """Each patch's result, each fix tried on its own copy of the files it touches (``read``:
    upstream path -> the base's bytes, or None where the base lacks it)."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="series-matrix-") as tmp:
        for fix in series.fixes:
            tree = Path(tmp) / fix.number / "tree"
            for path, added in fix.touched_files().items():
                data = None if added else read(path)
                if data is not None:
                    (tree / path).parent.mkdir(parents=True, exist_ok=True)
                    (tree / path).write_bytes(data)
            tree.mkdir(parents=True, exist_ok=True)
            for patch in fix.patches:
                results[patch.name] = _try(tree, series.root / patch.name, patch)
    return results


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
    """A table-sized detail: file base names, and no 'does not apply' (the status says so)."""
    parts = []
    for part in detail.split("; "):
        path, _, rest = part.partition(": ")
        if rest:
            rest = re.sub(r" @@ [^@]*@@.*? does not apply$", "", rest)
            part = f"{path.rsplit('/', 1)[-1]} {rest.replace(' does not apply', '')}"
        parts.append(part)
    return "; ".join(parts)


def render_table(names, rows) -> str:
    """A markdown table: one row per release, one column per patch."""
    header = ["sglang"] + [name.split("-", 1)[0] for name in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["version"]]
        for name in names:
            result = row["patches"][name]
            detail = short_detail(result["detail"])
            cells.append(result["status"] + (f" ({detail})" if detail else ""))
        lines.append("| " + " | ".join(cells) + " |")
    legend = [f"{name.split('-', 1)[0]}: {name}" for name in names]
    return "\n".join(lines + [""] + legend) + "\n"
