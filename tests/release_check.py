"""``python -m tools.releases watch --installed`` on this venv's sglang 0.5.23, once per session for two test modules:
the release watch's tests read its row, the ``ci run`` tests the A/B it ran through
``python -m ci run --backend cpu`` (``<out>/0.5.23``: results.json, report.md, JUnit, logs).
Started with the shared processes (``overlay_runs``), so it runs while other tests do."""

import os
import sys

import overlay_runs
from conftest import NO_RETRY_DELAY, REPO

TOKEN = "ghs_must_not_leak"  # in the check's environment: no output and no file may hold it


@overlay_runs.job("checked_0_5_23")
def _check_0_5_23(out):
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_OVERLAY_DISABLE"}
    env["GITHUB_TOKEN"] = TOKEN
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NO_RETRY_DELAY), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "tools.releases", "watch", "--versions", "0.5.23", "--installed"]
    proc = overlay_runs.POOL.run([*argv, "--out", str(out)], timeout=600, cwd=REPO, env=env)
    return proc, out


checked_0_5_23 = overlay_runs.fixture("checked_0_5_23")
