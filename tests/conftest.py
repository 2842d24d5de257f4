"""Shared helpers for the project's tests: fresh interpreters of the project venv."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REGISTERED_TEST = (
    REPO / "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
)
CPU_PROOF = REPO / "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py"
CPU_COMPANION = (
    REPO / "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
)
FUSED_KV_DIR = REPO / "test/registered/unit/kernels/ops/speculative"
FUSED_KV_TEST = REPO / "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py"
FUSED_KV_COMPANION = FUSED_KV_DIR / "test_fused_kv_workspace_release_order.py"
DFLASH_TEST = REPO / "test/registered/spec/dflash/test_dflash_draft_probs_peak.py"
DSA_Q8_TEST = REPO / "test/registered/kernels/ops/attention/test_dsa_q8kv8_scratch_peak.py"
DSA_Q8_COMPANION = REPO / "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py"
DSV4_Q8_TEST = REPO / "test/registered/kernels/ops/attention/dsv4/test_dsv4_q8kv8_qpad_peak.py"
DSV4_Q8_COMPANION = (
    REPO / "test/registered/unit/layers/attention/test_dsv4_q8kv8_qpad_release_order.py"
)
DFLASH_COMPANION = (
    REPO / "test/registered/unit/speculative/test_dflash_draft_probs_release_order.py"
)
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
# On PYTHONPATH, sglang's test-method retry comes without its 1.5-2 s back-off (the A/B jobs).
NO_RETRY_DELAY = REPO / "tests/fixtures/no_retry_delay"
OVERLAY_ENV = ("SGLANG_OVERLAY_DISABLE", "SGLANG_OVERLAY_STRICT")
# The processes the tests start write their records here, not into the runtime directory
# of whoever runs the tests (where `sglang-overlay status --processes` would list them).
os.environ.setdefault(
    "SGLANG_OVERLAY_RUNTIME_DIR", tempfile.mkdtemp(prefix="sglang-overlay-test-records-")
)


def clean_env(**overrides) -> dict:
    """This environment without the overlay's switches, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if k not in OVERLAY_ENV}
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    env.update(overrides)
    return env


# A shell without job control starts a background command with SIGINT ignored, and Python keeps
# an ignored SIGINT ignored: a test that sends SIGINT starts its process with the default action.
_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def with_default_sigint(*args: str) -> list:
    """The command line of this venv's ``python *args``, started with SIGINT's default action
    whatever this process inherited."""
    return [sys.executable, "-c", _DEFAULT_SIGINT, *args]


def run_python(code: str, *args: str, cwd=None, **env) -> subprocess.CompletedProcess:
    """Run ``python -c code`` in a fresh interpreter of this venv (cwd outside the repo, so
    the installed package, not the source tree, is what gets imported)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=clean_env(**env),
        cwd=cwd or "/",
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_json(code: str, **env):
    """Run ``code``, which prints one JSON document as its last stdout line; return it."""
    proc = run_python(code, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Files that ``ci run`` runs in the tests, as any pull request's tests: not the project's own.
collect_ignore = ["fixtures"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie or a reaped process does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def until(condition, within_s: float = 120.0) -> bool:
    """Whether ``condition()`` holds within ``within_s``, polled: a signal is delivered and a
    process reaped asynchronously, so what a test reads right after may not show it yet."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def runs_program(pid: int, path: str) -> bool:
    """Whether ``pid`` has finished exec'ing ``path`` (its executable and its stack start in
    /proc): ``Popen`` may return while the child is still inside ``execve``, since vfork
    resumes the parent before the new program's executable and stack are in place."""
    try:
        exe = os.stat(f"/proc/{pid}/exe")
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        return False
    target = os.stat(path)
    return (exe.st_dev, exe.st_ino) == (target.st_dev, target.st_ino) and fields[25] != "0"


def pytest_collection_modifyitems(config, items):
    """One pytest-xdist group per module (``--dist loadgroup``: a module's module-scoped
    fixtures are set up once, on one worker), modules that share a pool process or job
    (``overlay_runs``) or an expensive session fixture joined into one group, so that process
    runs, or that fixture is built, once in the session."""
    import overlay_runs  # imports this module: here, not at the top

    # drifted_main: a session fixture of three modules that takes a full clone and a commit
    names, parent = overlay_runs.pool_names() | {"drifted_main"}, {}

    def root(module):
        while parent.setdefault(module, module) != module:
            module = parent[module]
        return module

    owner = {}
    for item in items:
        module = root(item.path.name)
        for name in names.intersection(item.fixturenames):
            other = root(owner.setdefault(name, module))
            if other != module:
                parent[max(other, module)] = min(other, module)
                module = min(other, module)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(root(item.path.name)))
