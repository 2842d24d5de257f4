"""The ``proof`` part: wall time of ``python FILE -v`` (as upstream's runner starts it) and of
``ci run`` of it on both sides, over one bare import of the workspace module, alternated. FILE:
the registered test on CUDA, the CPU proof on CPU (where that test skips)."""

import statistics
import sys
import tempfile

from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.config import DISABLE_ENV
from tools.benchmark import alternate, summary

PROOF_FILES = {
    "cuda": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
    "cpu": "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py",
}
GOALS = {"file": 1.5, "ab": 1.5}  # over one bare import, on CUDA


def measure(device: str, repeats: int) -> dict:
    proof_file = PROOF_FILES[device]
    with tempfile.TemporaryDirectory() as out:
        ci_run = [sys.executable, "-m", "ci", "run", "--backend", device, "--tests", proof_file]
        ci_run += [f"--unmodified-env={DISABLE_ENV}=1", f"--change-env={DISABLE_ENV}=0"]
        commands = {"import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"]}
        commands["file"] = [sys.executable, proof_file, "-v"]
        commands["ab"] = lambda r: [*ci_run, "--jobs", "2", "--json", "--out", f"{out}/{r}"]
        walls = alternate(commands, repeats)
    bare = statistics.median(walls["import"])
    ratios = {k: round(statistics.median(walls[k]) / bare, 2) for k in ("file", "ab")}
    seconds = {kind: summary(values) for kind, values in walls.items()}
    goals = dict(GOALS) if device == "cuda" else {}
    return dict(
        file=proof_file, repeats=repeats, seconds=seconds, over_bare_import=ratios, goals=goals
    )
