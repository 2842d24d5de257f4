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
import threading

WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"  # the overlay's switch, as ci.runner sets it

# Runs in a child with the first listed mode's environment. The workspace module is imported
# first because the overlay only reports "applied" once the module it patches has been imported.
# A second listed mode differs only in the overlay switch: the child clears the switch and calls
# apply(), which is what a process started without it reports, without a second import.
_PROBE = f"""
import importlib, json, os, sys
modes = sys.argv[1:]
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
except ImportError:
    sglang_overlay = None
by_mode = {{}}
for index, mode in enumerate(modes):
    if index and sglang_overlay is not None:
        os.environ.pop({DISABLE_ENV!r}, None)
        sglang_overlay.apply()
    by_mode[mode] = dict(info, overlay=sglang_overlay and sglang_overlay.status())
print("CI_ENV " + json.dumps(by_mode))
"""


def probe_python(env: dict, cwd: str, modes=("probe",), timeout_s: float = 300) -> dict:
    """torch / CUDA / sglang / overlay facts as seen by a process with ``env``, one record per
    mode in ``modes`` (the first runs under ``env``, the others with the overlay switch off)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, *modes],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _lock:
        _running.add(proc.pid)
        if _behind:
            _lower(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {mode: {"error": f"probe timed out after {timeout_s}s"} for mode in modes}
    finally:
        with _lock:
            _running.discard(proc.pid)
    for line in stdout.splitlines():
        if line.startswith("CI_ENV "):
            return json.loads(line[len("CI_ENV ") :])
    error = {"error": f"probe exited {proc.returncode}: {stderr[-500:]}"}
    return {mode: error for mode in modes}


# Probes start at normal priority, while ``ci run`` itself only selects files on one core; once
# the test processes start, ``step_behind_tests()`` moves them behind, so they take what the
# tests leave instead of competing with them for the same cores.
_lock = threading.Lock()
_running: set[int] = set()
_behind = False


def step_behind_tests() -> None:
    """Lower the priority of every probe running now and of every probe started after."""
    global _behind
    with _lock:
        _behind = True
        for pid in _running:
            _lower(pid)


def _lower(pid: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except (OSError, AttributeError):  # gone already, or not a POSIX system
        pass


def probe_groups(mode_envs: dict[str, dict]) -> list[list[str]]:
    """Modes that one probe process can describe: environments equal but for the overlay switch,
    the one with the switch first (turning the overlay on in-process is possible, off is not)."""
    groups: list[list[str]] = []
    for mode, env in sorted(mode_envs.items(), key=lambda item: DISABLE_ENV not in item[1]):
        rest = {k: v for k, v in env.items() if k != DISABLE_ENV}
        for group in groups:
            first = mode_envs[group[0]]
            if (
                len(group) == 1
                and DISABLE_ENV not in env
                and rest == {k: v for k, v in first.items() if k != DISABLE_ENV}
            ):
                group.append(mode)
                break
        else:
            groups.append([mode])
    return groups


def probe_modes(mode_envs: dict[str, dict], cwd: str) -> dict:
    """One probe record per mode, from as few processes (each importing sglang) as possible."""
    records = {}
    for group in probe_groups(mode_envs):
        records.update(probe_python(mode_envs[group[0]], cwd, group))
    return {mode: records[mode] for mode in mode_envs}


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
    """The commit of the project at ``cwd``, when ``cwd`` is the top of a git work tree."""

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
        "modes": probe_modes(mode_envs, cwd),
    }
