"""The release watch's per-patch columns: for every patch the overlay carries, its state on a
release (with the sha256 of each method it read) and whether its series fix applies to the
release's wheel, so a release that breaks one patch's shape shows in that patch's column.

Pure functions over ``sglang-overlay status --json`` records and ``series matrix`` rows; the
patch ids come from ``sglang_overlay.PATCH_IDS`` (that module imports nothing).
"""

import re

from sglang_overlay import PATCH_IDS

# Fixed, or on purpose not fixed on this release; anything else is the patch's failure there.
OK_STATES = ("applied", "not-present", "upstream-fixed")
MAX_PATCHES = 32
_SHA256 = re.compile(r"sha256 ([0-9a-f]{12})")
_KEYS = {"patch": (str,), "state": (str,), "sha256": (str, type(None)), "series": (str,)}


def short_id(patch_id: str) -> str:
    return patch_id.split("-", 1)[0]


def from_status(records, fixes: dict) -> list:
    """One {patch, state, sha256, series} per status record; ``fixes`` maps a fix's number to
    how it applies ("clean", "fails (...)", "no such fix" for a patch the series lacks)."""
    found = []
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("patch"), str):
            continue
        state, sha = state_of(record)
        fix = fixes.get(short_id(record["patch"]), "no such fix in the series")
        found.append({"patch": record["patch"], "state": state, "sha256": sha, "series": fix})
    return found


def state_of(record: dict) -> tuple:
    """(state, its methods' sha256, ``a/b`` for two, or None) of one status record, as the
    watch names them: a patch whose module status's own child could not import is "does not
    import"."""
    state, reason = str(record.get("state")), str(record.get("reason", ""))
    if state == "failed" and "failed to import " in reason:
        state = "does not import"
    # a patch of several methods names each one's sha256
    sha = "/".join(dict.fromkeys(_SHA256.findall(reason)))
    return state, sha or None


def header_cells() -> list:
    return [short_id(p) for p in PATCH_IDS]


def cells(row) -> list:
    """One cell per carried patch: state, sha256, and whether its fix applies."""
    by_id = {short_id(p["patch"]): p for p in row.get("patches") or []}
    out = []
    for number in header_cells():
        patch = by_id.get(number)
        if patch is None:
            out.append("-")
            continue
        sha = f" {patch['sha256']}" if patch.get("sha256") else ""
        out.append(f"{patch['state']}{sha}; fix {patch['series']}")
    return out


def broken(row) -> "list[str]":
    """The patches whose state on this release is a failure (an unknown shape, a failed
    activation): each breaks the release's verdict."""
    return [p["patch"] for p in row.get("patches") or [] if p["state"] not in OK_STATES]


def problem(patches, max_text: int) -> "str | None":
    """What is wrong with a row's ``patches`` from another job, in one line, or None."""
    if not isinstance(patches, list) or len(patches) > MAX_PATCHES:
        return f"patches: expected a list of at most {MAX_PATCHES} records"
    for item in patches:
        if not isinstance(item, dict) or set(item) != set(_KEYS):
            return f"patches: each record has exactly {', '.join(sorted(_KEYS))}"
        for key, value in item.items():
            if type(value) not in _KEYS[key] or len(value or "") > max_text:
                return f"patches: {key} is not short text"
    return None
