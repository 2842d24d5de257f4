"""What ``ci run`` does before its test processes start, and what it works out beside them.

Before the first test process starts, ``ci run`` imports only what selects and launches the files:
nothing of the report (render, pictures, matplotlib), of the other verbs (ci.reporter.gate,
tools.releases.watch) or of what writes the results after the tests (JUnit, the series id), and it
never looks up its own version. The machine's facts and the series id, worked out beside the
tests, are recorded as before. A small registered file in a git checkout holding the project's
patches stands in for a pull request's tests.
"""

import json
import shutil
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import REPO, clean_env

TINY = """import unittest


def register_cpu_ci(**kwargs):  # read by AST
    pass


def register_cuda_ci(**kwargs):  # read by AST
    pass


register_cpu_ci(est_time=1, suite="base-a-test-cpu")
register_cuda_ci(est_time=1, suite="base-a-test-1-gpu-small")


class TestTiny(unittest.TestCase):
    def test_passes(self):
        self.assertTrue(True)


if __name__ == "__main__":
    unittest.main()
"""
# Imported before the first test process starts, any of these would delay it.
LATER = (
    "importlib.metadata",
    "matplotlib",
    "ci.reporter.render",
    "ci.reporter.pictures",
    "ci.reporter.gate",
    "tools.releases.watch",
    "ci.evidence.junit",
    "tools.series.seriesdir",
)
# Runs `ci run` in this interpreter and prints which of LATER were imported when run_all, which
# starts the test processes, was called; then the exit code.
WATCH = """
import json, sys
from ci.runner import launch
from ci.__main__ import main
later, seen = json.loads(sys.argv[1]), {}
run_all = launch.run_all


def watched(*args, **kwargs):
    seen["before"] = sorted(name for name in later if name in sys.modules)
    return run_all(*args, **kwargs)


launch.run_all = watched
code = main(sys.argv[2:])
print(json.dumps({"before": seen.get("before"), "exit": code}))
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    (root / "test/registered").mkdir(parents=True)
    (root / "test/registered/test_tiny.py").write_text(TINY)
    shutil.copytree(REPO / "patches", root / "patches")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tiny"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
            cwd=root,
            check=True,
        )
    return root


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_nothing_of_the_report_is_imported_before_the_test_processes_start(
    checkout, tmp_path, backend
):
    args = ["run", "--root", str(checkout), "--out", str(tmp_path / "out"), "--backend", backend]
    proc = subprocess.run(
        [sys.executable, "-c", WATCH, json.dumps(LATER), *args],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said == {"before": [], "exit": 0}, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out/results.json").read_text())
    assert [c["kind"] for c in data["cases"]] == ["preservation"]


def test_the_machine_and_the_series_worked_out_beside_the_tests_are_recorded(checkout, tmp_path):
    from tools.series import seriesdir

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--root", str(checkout), "--out", str(out)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    described = seriesdir.describe(checkout / "patches")
    assert data["series"] == {
        "id": described["id"],
        "release": described["release"],
        "patches": described["patches"],
        "fixes": [{"id": f["id"], "patches": f["patches"]} for f in described["fixes"]],
    }
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True
    ).stdout.strip()
    assert data["environment"]["git"] == {"commit": head, "dirty": False}
    assert "gpus" in data["environment"]


def test_the_version_is_the_installed_releases_looked_up_when_asked():
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "--version"],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (
        0,
        f"python -m ci {metadata.version('sglang-overlay')}\n",
    )
