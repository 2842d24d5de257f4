"""Wall time of the proof over one bare import of the workspace module (every proof pays that
once): ``python FILE -v`` as upstream's runner starts it and ``python -m ci run`` of it in both
modes (``--jobs 2``), alternated with the import in each repeat so a busy machine slows them
alike. FILE is the registered test on CUDA, ``test/proofs/cpu`` on CPU (where that test skips).
A command that exits non-zero stops the part (its time would measure nothing), so the recorded
exit codes are all 0; the goals are ratios of medians.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ci.runner import modes
from sglang_overlay import WORKSPACE_MODULE
from tools.benchmark import summary

PROOF_FILES = {
    "cuda": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
    "cpu": "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py",
}
GOALS = {"file": 1.5, "ab": 1.5}  # over one bare import, on CUDA (issue: the H200 figures)


def measure(device: str, repeats: int, root: Path) -> dict:
    proof_file = PROOF_FILES[device]
    env = modes.environment(modes.ModeSetup("change", overlay=True))
    walls: dict = {"import": [], "file": [], "ab": []}
    codes: dict = {"file": [], "ab": []}
    for r in range(repeats):
        for kind in ("import", "file", "ab") if r % 2 == 0 else ("ab", "file", "import"):
            with tempfile.TemporaryDirectory() as out:
                command = {
                    "import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"],
                    "file": [sys.executable, proof_file, "-v"],
                    "ab": [sys.executable, "-m", "ci", "run", "--out", out, "--backend", device]
                    + ["--tests", proof_file, "--jobs", "2", "--json"],
                }[kind]
                started = time.perf_counter()
                proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
                walls[kind].append(time.perf_counter() - started)
            if proc.returncode != 0:  # a figure of a command that failed measures nothing
                raise RuntimeError(f"{kind} exited {proc.returncode}: {' '.join(command)}")
            if kind in codes:
                codes[kind].append(proc.returncode)
    bare = summary(walls["import"])["median"]
    ratios = {kind: summary(walls[kind])["median"] / bare for kind in ("file", "ab")}
    return {
        "file": proof_file,
        "repeats": repeats,
        "seconds": {kind: summary(values) for kind, values in walls.items()},
        "returncodes": codes,
        "over_bare_import": {kind: round(value, 2) for kind, value in ratios.items()},
        "goals": dict(GOALS) if device == "cuda" else {},
    }
