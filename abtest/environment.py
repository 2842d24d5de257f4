"""Describe the machine and software a CI run used, for the results and the report.

For describing only. The software facts (torch, CUDA, sglang, the overlay's status) come from
the test processes themselves (``abtest/file_process.py`` writes them as each file's process
ends), one record per mode, so they are what the tests ran with and no extra process imports
sglang; this module keeps those records to known keys and plain values and adds the machine's
facts (GPUs, git). Importing torch or sglang here would put their state (and CUDA) into the CI
process itself, so it never does. Every part degrades to "unknown" rather than failing the
run: a missing nvidia-smi is a fact about the machine, not an error.
"""

import json
import os
import shutil
import subprocess

RECORD_CHARS = 64 * 1024  # a test process's record is PR code's output: bounded, then checked
TEXT_KEYS = (
    "python",
    "torch",
    "cuda",
    "gpu",
    "sglang",
    "sglang_path",
    "sglang_error",
    "torch_error",
    "overlay_error",
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
        record["overlay"] = [
            {k: _text(item.get(k)) for k in OVERLAY_KEYS}
            for item in overlay[:10]
            if isinstance(item, dict)
        ]
    elif "overlay" in raw:
        record["overlay"] = None
    return record


def _text(value):
    return None if value is None else str(value)[:FIELD_CHARS]


def records_by_mode(runs, modes) -> dict:
    """One record per mode: the first of that mode's test processes that wrote one."""
    by_mode = {}
    for mode in modes:
        records = (process_record(run.environment) for run in runs if run.mode == mode)
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
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": ",".join(parts[2:])})
    return gpus


def git_commit(cwd: str | None) -> dict:
    """The commit of the project at ``cwd``, when ``cwd`` is the top of a git work tree."""
    if not cwd:
        return {"commit": None, "dirty": None}

    def git(*args):
        try:
            proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        except OSError:
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    # Only the project's own checkout counts: a project copied into some other repository's
    # tree (a runner's workspace, a monorepo) would otherwise report that repository's commit.
    top = git("rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(cwd):
        return {"commit": None, "dirty": None}
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(dirty) if dirty is not None else None}


def describe_machine(cwd: str) -> dict:
    """The machine's part of the record: GPUs and the project's git commit (no test needed)."""
    return {"gpus": nvidia_smi(), "git": git_commit(cwd)}
