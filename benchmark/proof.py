"""Wall time of the proof: ``python -m ci run`` of the registered suite in both modes, serial
(``--jobs 1``) vs parallel, side by side with one bare import of the workspace module, and
where one capped case process spends its time.

The breakdown child is ``capped``'s, timing the registered grow case's phases: interpreter
start and exit (what the parent's wall time leaves over), importing the workspace module
(most of sglang), ``torch.cuda.init()`` and the case body. The goal compares the parallel
A/B with a bare import measured in the same run, alternating with it, so a busy machine
slows both. Not a test of the proof's verdict: ``ci run``'s exit code is recorded, nothing
more.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark import capped
from benchmark.memory import MODES
from benchmark.stats import summary
from ci import harness, results

# The parallel A/B over one bare import of the workspace module, at most, per device: on CPU
# the cases fork from one import per mode, on CUDA too when that import left CUDA alone
# (ci/file_process.py).
GOAL_AB_OVER_IMPORT = {"cpu": 3.0, "cuda": 1.5}
WORKSPACE_MODULE = "sglang.srt.layers.attention.dsv4.sparse_prefill_utils"
BREAKDOWN_CASE = "grow_bf16_64_to_96_mib"


def breakdown(device: str, repeats: int) -> dict:
    """One process at a time, so the phases are not slowed by each other."""
    steps = harness.TRANSITIONS[BREAKDOWN_CASE]
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
            for f in results.load(out).files:
                for mode, m in f.modes.items():
                    processes[f"{Path(f.path).name} {mode}"] = m.get("duration_s")
        except results.ResultsError:
            pass  # the exit code recorded below says why
    return {"wall_s": wall, "returncode": proc.returncode, "processes_s": processes}


def bare_import(root: Path) -> float:
    """Seconds for ``python -c "import <workspace module>"`` in the change mode's environment."""
    from ci.runner import mode_env

    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", f"import {WORKSPACE_MODULE}"],
        cwd=root,
        env=mode_env("change"),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def ci_wall(device: str, repeats: int, deadline: float, root: Path) -> dict:
    """Serial and parallel ``ci run`` and a bare import, alternating; a serial run that would
    overrun the time budget (estimated as twice the parallel run) is skipped and says so."""
    parallel_jobs = max(2, os.cpu_count() or 2)
    runs = {"serial": [], "parallel": []}
    imports = []
    skipped = []
    for r in range(repeats):
        order = ("import", "parallel", "serial") if r % 2 == 0 else ("serial", "parallel", "import")
        for kind in order:
            if kind == "import":
                imports.append(bare_import(root))
                continue
            done = runs["parallel"]
            estimate = (2.2 if kind == "serial" else 1.1) * (done[0]["wall_s"] if done else 0)
            if time.monotonic() + estimate > deadline:
                skipped.append(f"{kind} run {r + 1}: about {estimate:.0f} s, past the time budget")
                continue
            runs[kind].append(_ci_run(device, 1 if kind == "serial" else parallel_jobs, root))
    out = {"repeats": repeats, "parallel_jobs": parallel_jobs, "skipped": skipped}
    out["bare_import_s"] = summary(imports)
    for kind, values in runs.items():
        if values:
            out[kind] = {
                "wall_s": summary(v["wall_s"] for v in values),
                "returncodes": [v["returncode"] for v in values],
                "processes_s": values[0]["processes_s"],
            }
    return out


def judge(device: str, ci_run: dict) -> dict | None:
    """The goal, judged where it is measured: the parallel A/B over one bare import."""
    if "parallel" not in ci_run:
        return None
    limit = GOAL_AB_OVER_IMPORT[device]
    ratio = ci_run["parallel"]["wall_s"]["median"] / ci_run["bare_import_s"]["median"]
    return {
        "what": f"the parallel A/B <= {limit:g}x one bare import of the workspace module",
        "limit": limit,
        "value": round(ratio, 2),
        "met": ratio <= limit,
    }


def measure(device: str, repeats: int, ci_repeats: int, deadline: float, root: Path) -> dict:
    parts = {"device": device, "breakdown": breakdown(device, repeats)}
    parts["ci_run"] = ci_wall(device, ci_repeats, deadline, root)
    one_case = parts["breakdown"]["seconds"]["change"]["wall"]["median"]
    ratios = {}
    for kind in ("parallel", "serial"):
        if kind in parts["ci_run"]:
            ratios[kind] = parts["ci_run"][kind]["wall_s"]["median"] / one_case
    parts["ab_over_one_case"] = ratios
    parts["goal"] = judge(device, parts["ci_run"])
    return parts
