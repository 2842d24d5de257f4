"""Parts timed as whole processes, alternated A B A B so that a busy machine slows each alike:
``startup``, what the overlay's .pth hook adds to an interpreter's start (two throw-away venvs
over the project's site-packages, its .pth files not run; only the second also gets the overlay
and its .pth); ``proof``, the wall time of ``python FILE -v`` (as upstream's runner starts it)
and of ``ci run`` of it on both sides, over one bare import of the workspace module. FILE: the
registered test on CUDA, the CPU proof on CPU (where that test skips)."""

import json
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from sglang_overlay import WORKSPACE_MODULE
from sglang_overlay.config import DISABLE_ENV
from tools.benchmark import summary
from tools.series.seriesdir import REPO_ROOT

PROOF_FILES = {
    "cuda": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
    "cpu": "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py",
}
PROBE = (
    "import json, sys; print(json.dumps({m: m in sys.modules for m in "
    "('sglang_overlay.activation', 'torch', 'sglang', 'sglang_overlay.overlay')}))"
)
# The hook's calls during ``import torch`` and one call's time: its direct cost, free of the
# run-to-run noise of two ``import torch`` processes.
TRIGGER_COST = """
import json, timeit
import sglang_overlay.activation as startup
finder = type(startup.HOOK)
original, calls = finder.find_spec, [0]
def counting(self, name, path=None, target=None):
    calls[0] += 1
    return original(self, name, path, target)
finder.find_spec = counting
import torch
finder.find_spec = original
number = 200000
per_call = timeit.timeit(lambda: startup.HOOK.find_spec("numpy.core", None), number=number) / number
print(json.dumps({"calls": calls[0], "ns_per_call": per_call * 1e9, "ms": calls[0] * per_call * 1e3}))
"""


def timed(command) -> tuple:
    """(wall seconds, stdout) of ``command`` from the repository root; a non-zero exit raises."""
    started = time.perf_counter()
    command = [str(c) for c in command]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(command)[:200]} exited {proc.returncode}: {tail}")
    return wall, proc.stdout


def alternate(commands: dict, repeats: int) -> dict:
    """{name: [wall seconds per repeat]}, the commands run in order then in reverse."""
    walls: dict = {name: [] for name in commands}
    for r in range(repeats):
        for name in list(commands)[:: 1 if r % 2 == 0 else -1]:
            walls[name].append(timed(commands[name])[0])
    return walls


def _make_venv(root: Path, with_overlay: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(root)}))
    project_site = Path(sysconfig.get_path("purelib"))
    (site / "project_site.pth").write_text(f"{project_site}\n")
    if with_overlay:
        shutil.copy(project_site / "sglang_overlay.pth", site / "sglang_overlay.pth")
        shutil.copytree(project_site / "sglang_overlay", site / "sglang_overlay")
    return root / "bin" / "python"


def _run(python: Path, program: str):
    return json.loads(timed([python, "-c", program])[1])


def startup(device: str, quick: bool = False) -> dict:
    runs = 4 if quick else (10 if device == "cuda" else 20)
    with tempfile.TemporaryDirectory() as tmp:
        without = _make_venv(Path(tmp) / "without", with_overlay=False)
        with_ = _make_venv(Path(tmp) / "with", with_overlay=True)
        results = {"modules_after_start_with_overlay": _run(with_, PROBE)}
        results["trigger_cost_import_torch"] = _run(with_, TRIGGER_COST)
        for program in ("pass", "import torch"):
            # One warm-up pair for the page cache, then ``runs`` pairs.
            pair = {"without": [without, "-c", program], "with": [with_, "-c", program]}
            walls = alternate(pair, runs + 1)
            deltas = [(w - o) * 1000 for w, o in zip(walls["with"], walls["without"], strict=True)]
            results[program] = {"overlay_minus_without_ms": summary(deltas[1:]), "goal": "<= 1 ms"}
    return {"runs": runs, "results": results}


def proof(device: str, quick: bool = False) -> dict:
    repeats = 1 if quick else (5 if device == "cuda" else 3)  # ratios of medians need repeats
    proof_file = PROOF_FILES[device]
    with tempfile.TemporaryDirectory() as out:  # each ci run empties the earlier one's
        ci_run = [sys.executable, "-m", "ci", "run", "--backend", device, "--tests", proof_file]
        ci_run += [f"--unmodified-env={DISABLE_ENV}=1", f"--change-env={DISABLE_ENV}=0"]
        commands = {"import": [sys.executable, "-c", f"import {WORKSPACE_MODULE}"]}
        commands["file"] = [sys.executable, proof_file, "-v"]
        commands["ab"] = [*ci_run, "--jobs", "2", "--json", "--out", out]
        walls = alternate(commands, repeats)
    bare = statistics.median(walls["import"])
    ratios = {k: round(statistics.median(walls[k]) / bare, 2) for k in ("file", "ab")}
    seconds = {kind: summary(values) for kind, values in walls.items()}
    goals = {"file": 1.5, "ab": 1.5} if device == "cuda" else {}  # over one bare import
    return dict(file=proof_file, repeats=repeats, seconds=seconds, over_bare_import=ratios,
                goals=goals)  # fmt: skip
