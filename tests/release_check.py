"""``python -m tools.releases watch --installed`` on this venv's sglang, once per session."""

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
