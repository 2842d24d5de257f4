"""Wall time of the proof: ``python -m ci run`` of the registered suite in both modes, serial
(``--jobs 1``) vs parallel, and where one capped case process spends its time.

The breakdown child is ``capped``'s, timing the registered grow case's phases: interpreter
start and exit (what the parent's wall time leaves over), importing the workspace module
(most of sglang), ``torch.cuda.init()`` and the case body. The goal compares a whole A/B run
with one such process. Not a test of the proof's verdict: ``ci run``'s exit code is recorded,
nothing more.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark import capped
from benchmark.memory import MODES
from benchmark.stats import summary

GOAL_AB_OVER_ONE_CASE = 1.5
BREAKDOWN_CASE = "grow_bf16_64_to_96_mib"


def breakdown(device: str, repeats: int) -> dict:
    """One process at a time, so the phases are not slowed by each other."""
    steps = capped.load_registered().TRANSITIONS[BREAKDOWN_CASE]
    phases = {
        mode: {k: [] for k in ("wall", "interpreter", "import", "cuda_init", "body")}
        for mode in MODES
    }
    for r in range(repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            result = capped.launch(steps, device, 128, mode)
            t = result["timings_s"]
            p = phases[mode]
            p["wall"].append(result["wall_s"])
            p["import"].append(t["import"])
            p["cuda_init"].append(t["cuda_init"])
            p["body"].append(t["body"])
            p["interpreter"].append(result["wall_s"] - sum(t.values()))
    return {
        "case": BREAKDOWN_CASE,
        "repeats": repeats,
        "seconds": {m: {k: summary(v) for k, v in p.items()} for m, p in phases.items()},
    }


def _ci_run(device: str, jobs: int, root: Path) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "ci",
            "run",
            "--out",
            out,
            "--backend",
            device,
            "--jobs",
            str(jobs),
            "--json",
        ]
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - started
        processes = {}
        try:
            with open(os.path.join(out, "results.json")) as handle:
                for f in json.load(handle).get("files", []):
                    for mode, m in f.get("modes", {}).items():
                        processes[f"{Path(f['path']).name} {mode}"] = m.get("duration_s")
        except (OSError, ValueError):
            pass
    return {"wall_s": wall, "returncode": proc.returncode, "processes_s": processes}


def ci_wall(device: str, repeats: int, deadline: float, root: Path) -> dict:
    """Serial and parallel ``ci run``, alternating; a serial run that would overrun the time
    budget (estimated as twice the parallel run) is skipped and says so."""
    parallel_jobs = max(2, os.cpu_count() or 2)
    runs = {"serial": [], "parallel": []}
    skipped = []
    for r in range(repeats):
        for kind in ("parallel", "serial") if r % 2 == 0 else ("serial", "parallel"):
            done = runs["parallel"]
            estimate = (2.2 if kind == "serial" else 1.1) * (done[0]["wall_s"] if done else 0)
            if time.monotonic() + estimate > deadline:
                skipped.append(f"{kind} run {r + 1}: about {estimate:.0f} s, past the time budget")
                continue
            runs[kind].append(_ci_run(device, 1 if kind == "serial" else parallel_jobs, root))
    out = {"repeats": repeats, "parallel_jobs": parallel_jobs, "skipped": skipped}
    for kind, values in runs.items():
        if values:
            out[kind] = {
                "wall_s": summary(v["wall_s"] for v in values),
                "returncodes": [v["returncode"] for v in values],
                "processes_s": values[0]["processes_s"],
            }
    return out


def measure(device: str, repeats: int, ci_repeats: int, deadline: float, root: Path) -> dict:
    parts = {"device": device, "breakdown": breakdown(device, repeats)}
    parts["ci_run"] = ci_wall(device, ci_repeats, deadline, root)
    one_case = parts["breakdown"]["seconds"]["change"]["wall"]["median"]
    ratios = {}
    for kind in ("parallel", "serial"):
        if kind in parts["ci_run"]:
            ratios[kind] = parts["ci_run"][kind]["wall_s"]["median"] / one_case
    parts["ab_over_one_case"] = ratios
    parts["goal"] = f"parallel A/B <= {GOAL_AB_OVER_ONE_CASE}x one case process"
    return parts
