"""What ``ci run`` records beside the tests: the machine's facts, the git commit and the series
it is given (``--series``, as ``python -m tools.series describe`` prints it); and ``--version``.
A small registered file in a git checkout holding the project's patches stands in for a pull
request's tests.
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


def test_the_machine_and_the_series_it_is_given_are_recorded(checkout, tmp_path):
    from tools.series import seriesdir

    out, series = tmp_path / "out", tmp_path / "series.json"
    series.write_text(json.dumps(seriesdir.describe(checkout / "patches")))
    argv = ["run", "--root", str(checkout), "--out", str(out), "--series", str(series)]
    argv += ["--unmodified-env", "SIDE=unmodified", "--change-env", "SIDE=change"]
    proc = subprocess.run(
        [sys.executable, "-m", "ci", *argv],
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


def test_the_version_is_the_installed_release():
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
