"""The ``startup`` part: what the overlay's .pth hook adds to an interpreter's start, timed A B A B
in two throw-away venvs over the project's site-packages (its .pth files not run); only the
second also gets the overlay and its .pth."""

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tools.benchmark import alternate, summary, timed

PROGRAMS = ("pass", "import torch")
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


PURELIB = "import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))"


def _make_venv(root: Path, with_overlay: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(_run(python, PURELIB))
    project_site = Path(sysconfig.get_paths()["purelib"])
    (site / "project_site.pth").write_text(f"{project_site}\n")
    if with_overlay:
        shutil.copy(project_site / "sglang_overlay.pth", site / "sglang_overlay.pth")
        shutil.copytree(project_site / "sglang_overlay", site / "sglang_overlay")
    return python


def _run(python: Path, program: str):
    return json.loads(timed([python, "-c", program])[1])


def measure(runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        without = _make_venv(Path(tmp) / "without", with_overlay=False)
        with_ = _make_venv(Path(tmp) / "with", with_overlay=True)
        results = {"modules_after_start_with_overlay": _run(with_, PROBE)}
        results["trigger_cost_import_torch"] = _run(with_, TRIGGER_COST)
        for program in PROGRAMS:
            # One warm-up pair for the page cache, then ``runs`` pairs.
            pair = {"without": [without, "-c", program], "with": [with_, "-c", program]}
            walls = alternate(pair, runs + 1)
            deltas = [(w - o) * 1000 for w, o in zip(walls["with"], walls["without"], strict=True)]
            results[program] = {"overlay_minus_without_ms": summary(deltas[1:]), "goal": "<= 1 ms"}
    return {"runs": runs, "results": results}
