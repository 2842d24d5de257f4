"""Shared helpers for the project's tests: fresh interpreters of the project venv."""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPU_PROOF = REPO / "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py"
CPU_COMPANION = (
    REPO / "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_release_order.py"
)
FUSED_KV_DIR = REPO / "test/registered/unit/kernels/ops/speculative"
FUSED_KV_COMPANION = FUSED_KV_DIR / "test_fused_kv_workspace_release_order.py"
DSA_Q8_COMPANION = REPO / "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py"
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
# The processes the tests start record themselves here, not in the user's runtime directory;
# the process that made it (xdist workers inherit it) removes it at exit.
if "SGLANG_OVERLAY_RUNTIME_DIR" not in os.environ:
    os.environ["SGLANG_OVERLAY_RUNTIME_DIR"] = tempfile.mkdtemp(
        prefix="sglang-overlay-test-records-"
    )
    atexit.register(shutil.rmtree, os.environ["SGLANG_OVERLAY_RUNTIME_DIR"], ignore_errors=True)


# A fixture, not module level: every xdist worker collects every module, and importing sglang costs.
@pytest.fixture(scope="module")
def fused_kv_importable():
    pytest.importorskip("sglang.kernels.ops.speculative.fused_kv_materialize")


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
    """This venv's ``python *args``, started with SIGINT's default action whatever was inherited."""
    return [sys.executable, "-c", _DEFAULT_SIGINT, *args]


def run_python(code: str, *args: str, cwd=None, **env) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter, cwd outside the repo (the installed package)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=clean_env(**env),
        cwd=cwd or "/",
        capture_output=True,
        text=True,
        timeout=300,
    )


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
    """Whether ``condition()`` holds within ``within_s``, polled (signals and reaping are async)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def runs_program(pid: int, path: str) -> bool:
    """Whether ``pid`` has finished exec'ing ``path``: ``Popen`` may return inside ``execve``."""
    try:
        exe = os.stat(f"/proc/{pid}/exe")
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        return False
    target = os.stat(path)
    return (exe.st_dev, exe.st_ino) == (target.st_dev, target.st_ino) and fields[25] != "0"


# Under ``-n 2 --dist loadfile`` the modules of a group run on one worker, since they share a
# pool process or job (``overlay_runs``) or a session fixture; the first module names the group.
XDIST_GROUPS = {
    "test_activation.py": "test_activation.py",
    "test_ci_attacks.py": "test_activation.py",
    "test_ci_run.py": "test_ci_run.py",
    "test_ci_watch.py": "test_ci_run.py",
}


def group_of(module: str) -> str:
    return XDIST_GROUPS.get(module, module)


def pytest_collection_modifyitems(config, items):
    """Refuse modules sharing a pool process or job outside one group of ``XDIST_GROUPS``."""
    import overlay_runs  # imports this module: here, not at the top

    names = overlay_runs.pool_names()
    users = {}
    for item in items:
        for name in names.intersection(item.fixturenames):
            users.setdefault(name, set()).add(item.path.name)
    for name, modules in sorted(users.items()):
        if len({group_of(m) for m in modules}) > 1:
            raise pytest.UsageError(
                f"tests/conftest.py: {', '.join(sorted(modules))} share {name}; put them in one "
                "group of XDIST_GROUPS"
            )


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist has no such hook to call
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with each group of ``XDIST_GROUPS`` one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupedFiles(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return group_of(path.rsplit("/", 1)[-1])

    return GroupedFiles(config, log)
