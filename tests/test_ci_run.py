"""`python -m ci run` for real on the registered CPU test, once, in both modes (~15 s)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from ci import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = harness.FILE
REGRESSIONS = harness.regression_tests()  # ci/regressions.txt, the one list


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ci-run")
    env = dict(os.environ, GITHUB_TOKEN="ghs_must_not_leak")
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", "--jobs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    data = json.loads((out / "results.json").read_text())
    return proc, out, data


def test_cpu_run_exits_0_because_every_case_passes_with_the_change(cpu_run):
    proc, _, _ = cpu_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ci run: ok" in proc.stdout


def test_unmodified_mode_ooms_the_regression_cases_and_the_change_fixes_them(cpu_run):
    _, _, data = cpu_run
    cpu = {
        c["case_id"].split(".")[-1]: c
        for c in data["cases"]
        if c["case_id"].startswith("TestSparsePrefillWorkspaceCPU.")
    }
    assert REGRESSIONS and REGRESSIONS <= set(cpu) and len(cpu) > len(REGRESSIONS)
    for name, case in cpu.items():
        if name in REGRESSIONS:
            assert case["kind"] == "regression", name
            assert case["modes"]["unmodified"]["outcome"] == "fail"
            assert case["modes"]["unmodified"]["evidence"][0]["outcome"] == "oom"
        else:
            assert case["kind"] == "preservation", name
        assert case["modes"]["change"]["outcome"] == "pass"
        # The registered file runs its cases concurrently, so a case may be done when its test
        # starts: the duration is the time its test waited, possibly 0.
        assert case["modes"]["change"]["duration_s"] >= 0
    cuda = [c for c in data["cases"] if c["case_id"].startswith("TestSparsePrefillWorkspaceCUDA")]
    assert cuda and all(c["kind"] == "skipped" for c in cuda)
    assert data["files"][0]["flags"] == []


def test_environment_records_the_overlay_state_per_mode(cpu_run):
    _, _, data = cpu_run
    modes = data["environment"]["modes"]
    assert modes["change"]["overlay"][0]["state"] == "applied"
    # Disabled, the overlay never hooks the import, so it may say "disabled" or "pending".
    assert modes["unmodified"]["overlay"][0]["state"] != "applied"
    assert modes["change"]["sglang"] and modes["change"]["torch"]
    assert data["environment"]["git"]["commit"]


def test_junit_and_logs_are_written_per_mode(cpu_run):
    _, out, data = cpu_run
    unmodified = ET.parse(out / "junit-unmodified.xml").getroot()
    change = ET.parse(out / "junit-change.xml").getroot()
    assert unmodified.find("testsuite").get("failures") == "4"
    assert change.find("testsuite").get("failures") == "0"
    for mode in ("unmodified", "change"):
        log = out / data["files"][0]["modes"][mode]["log"]
        assert "DSV4_WORKSPACE_CASE" in log.read_text()


def test_the_token_never_reaches_output_or_artifacts(cpu_run):
    proc, out, _ = cpu_run
    assert "ghs_must_not_leak" not in proc.stdout + proc.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert "ghs_must_not_leak" not in path.read_text(errors="replace"), path


def test_the_artifact_has_the_full_report_def_lines_and_a_picture_per_regression(cpu_run):
    _, out, data = cpu_run
    report = (out / "report.md").read_text()
    assert "| Case | Kind | Unmodified main | This change |" in report and "Shortened" not in report
    with open(os.path.join(ROOT, FILE)) as handle:
        source = handle.read().splitlines()
    for case in data["cases"]:
        name = case["case_id"].split(".")[-1]
        assert source[case["line"] - 1].strip().startswith(f"def {name}("), name
    regressions = [c for c in data["cases"] if c["kind"] == "regression"]
    keys = {f"{c['file']}::{c['case_id']}" for c in regressions}
    assert set(data["pictures"]) == keys
    for rel in data["pictures"].values():
        assert (out / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Memory pictures" in report
