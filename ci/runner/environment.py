"""What a CI run ran on, for the results and the report: each mode's record, which its own test
processes wrote (``ci/runner/file_process.py``), kept to known keys and plain values, and the
machine's facts (GPUs, git). It never imports torch or sglang (that would put their state, and
CUDA, into the CI process), and a fact it cannot read is unknown, not an error.
"""

import json
import shutil
import subprocess

from ci import gitcmd

RECORD_CHARS = 64 * 1024  # a test process's record is PR code's output: bounded, then checked
TEXT_KEYS = (
    "python torch cuda gpu sglang sglang_path sglang_error torch_error overlay_error "
    "preloaded".split()
)
OVERLAY_KEYS = ("patch", "state", "target", "sglang_version", "reason")
FIELD_CHARS = 500


def process_record(text: str) -> dict | None:
    """The facts one test process wrote about itself, kept to known keys and plain values;
    None when it wrote nothing usable."""
    try:
        raw = json.loads(text[:RECORD_CHARS])
    except (ValueError, RecursionError):  # not JSON; nested past the parser (a few KB do it)
        return None
    if not isinstance(raw, dict):
        return None
    record = {k: _text(raw[k]) for k in TEXT_KEYS if k in raw}
    overlay = raw.get("overlay")
    if isinstance(overlay, list):
        items = [item for item in overlay[:10] if isinstance(item, dict)]
        record["overlay"] = [{k: _text(item.get(k)) for k in OVERLAY_KEYS} for item in items]
    elif "overlay" in raw:
        record["overlay"] = None
    return record


def _text(value):
    return None if value is None else str(value)[:FIELD_CHARS]


def records_by_mode(runs, modes) -> dict:
    """One record per mode: the first of that mode's test processes that wrote one."""
    by_mode = {}
    for mode in modes:
        records = (process_record(run.environment or "") for run in runs if run.mode == mode)
        by_mode[mode] = next(
            (r for r in records if r is not None),
            {"error": "no test process of this mode reported its environment"},
        )
    return by_mode


def nvidia_smi() -> list[dict]:
    """GPU name and driver per device, or [] where there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": ",".join(r[2:])} for r in rows if len(r) >= 2]


def git_commit(cwd: str | None) -> dict:
    """The commit of the project at ``cwd``, when ``cwd`` is the top of a git work tree."""
    try:
        # Only the project's own checkout counts, not a repository it was copied into.
        if not cwd or not gitcmd.is_top(cwd):
            return {"commit": None, "dirty": None}
        dirty = gitcmd.changed(cwd)
        dirty = None if dirty is None else bool(dirty)
        return {"commit": gitcmd.out(["rev-parse", "HEAD"], cwd, check=False), "dirty": dirty}
    except OSError:  # no git
        return {"commit": None, "dirty": None}
