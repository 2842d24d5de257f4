"""Start-up cost of the installed overlay: the same interpreter and packages with and without
the overlay's .pth hook, interleaved A B A B, ``python -c pass`` and ``python -c "import torch"``.
Two throw-away venvs see the project venv's site-packages as a plain path (so its .pth files,
ours included, are not run); only the second also gets the overlay package and its .pth.
"""

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tools.benchmark import launch, summary

PROGRAMS = ("pass", "import torch")
# The two programs hand their figures back on launch's descriptor.
HAND_BACK = "json.dump({}, open(int(os.environ['BENCH_RESULT_FD']), 'w'))"
PROBE = "import json, os, sys; " + HAND_BACK.format(
    "{m: m in sys.modules for m in "
    "('sglang_overlay.activation', 'torch', 'sglang', 'sglang_overlay.overlay')}"
)
# Counts the start-up hook's calls during ``import torch`` and times one call: what the
# installed hook adds to an interpreter that never imports sglang, free of the run-to-run
# noise of a wall-clock difference between two ``import torch`` processes.
TRIGGER_COST = """
import json, os, timeit
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
figures = {"calls": calls[0], "ns_per_call": per_call * 1e9, "ms": calls[0] * per_call * 1e3}
""" + HAND_BACK.format("figures")


def _make_venv(root: Path, with_overlay: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = HAND_BACK.format("sysconfig.get_paths()['purelib']")
    site = Path(_run(python, "import json, os, sysconfig; " + purelib)[0])
    project_site = Path(sysconfig.get_paths()["purelib"])
    (site / "project_site.pth").write_text(f"{project_site}\n")
    if with_overlay:
        shutil.copy(project_site / "sglang_overlay.pth", site / "sglang_overlay.pth")
        shutil.copytree(project_site / "sglang_overlay", site / "sglang_overlay")
    return python


def _run(python: Path, program: str) -> tuple:
    """``python -c program``: (what it handed back, its wall time in seconds)."""
    ran = launch.run([python, "-c", program])
    return ran.result, ran.wall_s


def measure(runs: int = 30) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        without = _make_venv(Path(tmp) / "without", with_overlay=False)
        with_ = _make_venv(Path(tmp) / "with", with_overlay=True)
        results = {
            "modules_after_start_with_overlay": _run(with_, PROBE)[0],
            "trigger_cost_import_torch": _run(with_, TRIGGER_COST)[0],
        }
        for program in PROGRAMS:
            # One warm-up pair for the page cache, then ``runs`` pairs.
            pairs = launch.alternate(
                {"without": [without, "-c", program], "with": [with_, "-c", program]}, runs + 1
            )
            deltas = [
                (w.wall_s - o.wall_s) * 1000
                for w, o in zip(pairs["with"], pairs["without"], strict=True)
            ]
            results[program] = {"overlay_minus_without_ms": summary(deltas[1:]), "goal": "<= 1 ms"}
    return {"runs": runs, "results": results}
