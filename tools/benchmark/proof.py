"""Wall time of the proof over one bare import of the workspace module (every proof pays that
once): ``python FILE -v`` as upstream's runner starts it and ``python -m ci run`` of it on both
sides (``--jobs 2``), alternated with the import in each repeat so a busy machine slows them
alike. FILE is the registered test on CUDA, ``test/proofs/cpu`` on CPU (where that test skips).
Every command must exit 0; the goals are ratios of medians.
"""

import sys
import tempfile

from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.config import DISABLE_ENV
from tools.benchmark import launch, summary

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
        runs = launch.alternate(
            {
                "import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"],
                "file": [sys.executable, proof_file, "-v"],
                "ab": lambda r: [*ci_run, "--jobs", "2", "--json", "--out", f"{out}/{r}"],
            },
            repeats,
            launch.side_env("change"),
        )
    return {
        "file": proof_file,
        "repeats": repeats,
        "seconds": {kind: summary(r.wall_s for r in ran) for kind, ran in runs.items()},
        "over_bare_import": launch.over(runs, ("file", "ab"), "import"),
        "goals": dict(GOALS) if device == "cuda" else {},
    }
