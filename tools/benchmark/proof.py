"""Wall time of the proof over one bare import of the workspace module (every proof pays that
once): ``python FILE -v`` as upstream's runner starts it and ``python -m ci run`` of it on both
sides (``--jobs 2``), alternated with the import in each repeat so a busy machine slows them
alike. FILE is the registered test on CUDA, ``test/proofs/cpu`` on CPU (where that test skips).
Every command must exit 0; the goals are ratios of medians.
"""

import sys
import tempfile

from sglang_overlay import WORKSPACE_MODULE
from tools.benchmark import launch, summary

PROOF_FILES = {
    "cuda": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
    "cpu": "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py",
}
GOALS = {"file": 1.5, "ab": 1.5}  # over one bare import, on CUDA


def measure(device: str, repeats: int) -> dict:
    proof_file = PROOF_FILES[device]
    env = launch.side_env("change")
    walls: dict = {"import": [], "file": [], "ab": []}
    for r in range(repeats):
        for kind in ("import", "file", "ab") if r % 2 == 0 else ("ab", "file", "import"):
            with tempfile.TemporaryDirectory() as out:
                command = {
                    "import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"],
                    "file": [sys.executable, proof_file, "-v"],
                    "ab": [sys.executable, "-m", "ci", "run", "--out", out, "--backend", device]
                    + ["--tests", proof_file, "--jobs", "2", "--json"],
                }[kind]
                walls[kind].append(launch.run(command, env).wall_s)
    bare = summary(walls["import"])["median"]
    return {
        "file": proof_file,
        "repeats": repeats,
        "seconds": {kind: summary(values) for kind, values in walls.items()},
        "over_bare_import": {
            k: round(summary(walls[k])["median"] / bare, 2) for k in ("file", "ab")
        },
        "goals": dict(GOALS) if device == "cuda" else {},
    }
