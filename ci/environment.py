"""Describe the machine and software a CI run used, for the results and the report.

For probing only, and always in child processes: importing torch or sglang here would put
their state (and CUDA) into the CI process itself. Every probe degrades to "unknown" rather
than failing the run: a missing nvidia-smi is a fact about the machine, not an error.
"""

import json
import os
import shutil
import subprocess
import sys

WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"

# Runs in a child with a mode's environment. The workspace module is imported first because the
# overlay only reports "applied" once the module it patches has been imported.
_PROBE = f"""
import importlib, json
info = {{}}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["gpu"] = torch.cuda.get_device_name(0)
except Exception as exc:
    info["torch_error"] = f"{{type(exc).__name__}}: {{exc}}"
try:
    from importlib.metadata import version
    info["sglang"] = version("sglang")
except Exception:
    info["sglang"] = None
try:
    import sglang
    info["sglang_path"] = sglang.__file__
    importlib.import_module({WORKSPACE_MODULE!r})
except Exception as exc:
    info["sglang_error"] = f"{{type(exc).__name__}}: {{exc}}"
try:
    import sglang_overlay
    info["overlay"] = sglang_overlay.status()
except ImportError:
    info["overlay"] = None
print("CI_ENV " + json.dumps(info))
"""


def probe_python(env: dict, cwd: str, timeout_s: float = 300) -> dict:
    """torch / CUDA / sglang / overlay facts as seen by a process with ``env``."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {timeout_s}s"}
    for line in proc.stdout.splitlines():
        if line.startswith("CI_ENV "):
            return json.loads(line[len("CI_ENV ") :])
    return {"error": f"probe exited {proc.returncode}: {proc.stderr[-500:]}"}


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


def git_commit(cwd: str) -> dict:
    def git(*args):
        try:
            proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        except OSError:
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(dirty) if dirty is not None else None}


def series_identity(cwd: str) -> dict:
    """The id of the patch series in ``cwd``/patches (``tools.identity``); ``pr-body`` checks it."""
    try:
        from tools import identity

        return identity.describe(os.path.join(cwd, "patches"))
    except Exception as exc:  # a checkout without the series is a fact, not a failed run
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def describe(mode_envs: dict[str, dict], cwd: str) -> dict:
    """The whole environment record: machine, git, the series' id, and a probe per mode."""
    return {
        "python": sys.version.split()[0],
        "gpus": nvidia_smi(),
        "git": git_commit(cwd),
        "series": series_identity(cwd),
        "modes": {mode: probe_python(env, cwd) for mode, env in mode_envs.items()},
    }
