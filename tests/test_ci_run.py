"""``python -m ci run`` for real: A/B, base against head, retries, bad input, Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import overlay_runs
import pytest
import release_check
from ci_samples import cli as ci
from ci_samples import registered
from conftest import (
    CPU_COMPANION,
    CPU_PROOF,
    DFLASH_COMPANION,
    DSA_Q8_COMPANION,
    DSV4_Q8_COMPANION,
    FUSED_KV_COMPANION,
    NO_RETRY_DELAY,
    REPO,
    alive,
    clean_env,
    until,
    with_default_sigint,
)
from release_check import TOKEN
from sglang_layout import IDENTITY

from ci.__main__ import main

FIXTURES = "tests/fixtures/upstream_style"
PYTEST_STYLE = f"{FIXTURES}/test_release_first_pytest.py"
RETRIED = f"{FIXTURES}/test_retried_in_ci.py"
EVERY_WAY = f"{FIXTURES}/test_every_way_retried.py"
PYTEST_WAY = f"{FIXTURES}/test_pytest_way_retried.py"
OVERLAY_SIDES = ["--unmodified-env", "SGLANG_OVERLAY_DISABLE=1"]
OVERLAY_SIDES += ["--change-env", "SGLANG_OVERLAY_DISABLE=0"]
OFF, ON = "sglang 0.5.23 (SGLANG_OVERLAY_DISABLE=1)", "sglang 0.5.23 (SGLANG_OVERLAY_DISABLE=0)"
BORN_Q_COMPANION = (
    REPO / "test/registered/unit/layers/attention/test_dsa_q8kv8_born_q_release_order.py"
)
# file -> (preservations, regressions) of the overlay's A/B on CPU
PROVED = {
    str(path.relative_to(REPO)): counts
    for path, counts in (
        (CPU_PROOF, (2, 4)),
        (CPU_COMPANION, (3, 2)),
        (FUSED_KV_COMPANION, (1, 3)),
        (DFLASH_COMPANION, (2, 2)),
        (DSA_Q8_COMPANION, (2, 3)),
        (DSV4_Q8_COMPANION, (1, 1)),
        (BORN_Q_COMPANION, (3, 3)),
    )
}
PROOF = str(CPU_PROOF.relative_to(REPO))


checked_0_5_23 = release_check.checked_0_5_23


@pytest.fixture(scope="module")
def overlay_run(checked_0_5_23):
    proc, out = checked_0_5_23
    return proc, out / "0.5.23", json.loads((out / "0.5.23" / "results.json").read_text())


def test_the_cpu_tests_reproduce_the_bug_unmodified_and_pass_with_the_overlay(overlay_run):
    proc, out, data = overlay_run
    assert proc.returncode == 0 and data["verdict"] == "ok", proc.stdout + proc.stderr
    kinds = {}
    for case in data["cases"]:
        kinds.setdefault(case["file"], []).append(case["kind"])
        if case["kind"] == "regression":  # as sglang's CI runs them: the retry fails too
            assert case["modes"]["unmodified"]["attempts"] == ["fail", "fail"], case["test"]
    assert {f: (k.count("preservation"), k.count("regression")) for f, k in kinds.items()} == PROVED
    grow = next(c for c in data["cases"] if c["file"] == PROOF and "grow" in c["test"])
    assert "peaked at 160.0 MiB" in grow["modes"]["unmodified"]["detail"]
    assert {m: v["peak_mib"] for m, v in grow["modes"].items()} == {
        "unmodified": 160.0,
        "change": 96.0,
    }
    assert {
        "file": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
        "why": "registered for cuda only",
    } in data["selection"]["not_run"]
    assert {m: s["label"] for m, s in data["sides"].items()} == {"unmodified": OFF, "change": ON}
    assert {m: s["env"] for m, s in data["environment"]["sides"].items()} == {
        "unmodified": {"SGLANG_OVERLAY_DISABLE": "1"},
        "change": {"SGLANG_OVERLAY_DISABLE": "0"},
    }


def test_junit_logs_and_def_lines_come_with_the_results_and_no_token(overlay_run):
    from ci.evidence import shards

    proc, out, data = overlay_run
    assert shards.load(str(out)).verdict == data["verdict"]  # the report judges it the same
    unmodified = ET.parse(out / "junit-unmodified.xml").getroot()
    assert unmodified.get("name") == f"{OFF} (cpu)"
    errors = {s.get("name"): int(s.get("errors")) for s in unmodified.findall("testsuite")}
    assert errors == {path: regressions for path, (_, regressions) in PROVED.items()}
    changed = ET.parse(out / "junit-change.xml").getroot().findall("testsuite")
    assert [s.get("errors") for s in changed] == ["0"] * len(PROVED)
    for case in data["cases"]:
        source = (REPO / case["file"]).read_text().splitlines()
        name = case["test"].split(".")[-1]
        assert source[case["line"] - 1].strip().startswith(f"def {name}("), name
    proof = next(f for f in data["files"] if f["path"] == PROOF)
    assert (
        "not less than or equal to 128" in (out / proof["modes"]["unmodified"]["log"]).read_text()
    )
    assert TOKEN not in proc.stdout + proc.stderr
    for path in out.parent.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path


def _ci_run_in_pool(out, *args):
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", *args]
    env = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    return overlay_runs.POOL.run(argv, timeout=900, cwd=REPO, env=env)


# A shared job (``overlay_runs``): sglang 0.5.23 against a copy with the series applied.
@overlay_runs.job("trees_run")
def _trees_run(directory):
    from ci import gitcmd
    from tools.series import base, check, seriesdir

    series = seriesdir.load()
    base_tree = base.materialize(series.base.version, directory / "base" / "sglang")
    head = base.materialize(series.base.version, directory / "head" / "sglang")
    check.am_series(series, head, env=gitcmd.TOOL_IDENTITY)
    sides = ["--unmodified-src", str(base_tree), "--change-src", str(head)]
    sides += ["--unmodified-env", "SGLANG_OVERLAY_DISABLE=1"]
    sides += ["--change-env", "SGLANG_OVERLAY_DISABLE=1"]
    proc = _ci_run_in_pool(directory / "out", "--tests", "test/proofs", PYTEST_STYLE, *sides)
    return (base_tree, head), proc, json.loads((directory / "out" / "results.json").read_text())


trees_run = overlay_runs.fixture("trees_run")


def test_a_pull_requests_base_against_its_head_proves_its_tests(trees_run, overlay_run):
    trees, proc, data = trees_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ci run: ok: 5 regression, 4 preservation" in proc.stdout
    cases = {c["test"]: c for c in data["cases"] if c["file"] == PYTEST_STYLE}
    assert {test: c["kind"] for test, c in cases.items()} == {
        "test_replacement_allocates_after_releasing_the_old_scratch": "regression",
        "test_a_request_that_fits_reuses_the_scratch[4]": "preservation",
        "test_a_request_that_fits_reuses_the_scratch[8]": "preservation",
    }
    assert len({c["line"] for c in cases.values()}) == 2  # a parametrized id has its def's line
    sides = data["sides"]
    assert not sides["unmodified"]["overlay"] and not sides["change"]["overlay"]
    assert sides["change"]["label"] == f"sglang 0.5.23 @ {sides['change']['commit'][:12]}"
    for mode, tree in zip(("unmodified", "change"), trees, strict=True):
        path = data["environment"]["modes"][mode]["sglang_path"]
        assert path.startswith(str(tree)), (mode, path)
    assert data["environment"]["upstream_ci"]["SGLANG_IS_IN_CI"] == "true"

    def outcomes(data):
        return {
            (c["test"], mode): c["modes"][mode]["outcome"]
            for c in data["cases"]
            if c["file"] == PROOF
            for mode in ("unmodified", "change")
        }

    assert outcomes(data) == outcomes(overlay_run[2]) and len(outcomes(data)) == 12


# sglang's CustomTestCase retry under SGLANG_IS_IN_CI, and every other way a method runs again.
@overlay_runs.job("retry_run")
def _retry_run(directory):
    listed = directory / "regressions.txt"
    listed.write_text(f"{RETRIED}::*.test_state_built_*\n{RETRIED}::*.test_fails_every_*\n")
    args = ["--tests", RETRIED, EVERY_WAY, PYTEST_WAY, "--regressions", str(listed)]
    args += OVERLAY_SIDES
    return _ci_run_in_pool(directory / "out", *args), directory / "out"


retry_run = overlay_runs.fixture("retry_run")


def test_upstreams_retry_masks_a_regression_and_shows_flaky_tests_everywhere(retry_run, capsys):
    proc, out = retry_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    cases = {c["test"].split(".")[-1]: c for c in data["cases"] if c["file"] == RETRIED}
    assert {name: c["kind"] for name, c in cases.items()} == {
        "test_state_built_in_setup_passes_on_the_retry": "masked-by-retry",
        "test_fails_every_attempt_unmodified": "regression",
        "test_flaky_with_the_change": "flaky",
        "test_async_flaky_with_the_change": "flaky",
    }
    masked = cases["test_state_built_in_setup_passes_on_the_retry"]["modes"]["unmodified"]
    assert masked["outcome"] == "pass" and masked["attempts"] == ["fail", "pass"]
    assert masked["detail"].startswith("attempt 1 of 2 failed, the last passed:")
    assert "the first attempt fails unmodified" in masked["detail"]
    assert cases["test_async_flaky_with_the_change"]["modes"]["change"]["attempts"] == [
        "fail",
        "pass",
    ]
    junit = ET.parse(out / "junit-unmodified.xml").getroot()
    said = junit.findall(
        ".//testcase[@name='test_state_built_in_setup_passes_on_the_retry']/flakyFailure"
    )
    assert [f.get("message").split(":")[0] for f in said] == ["masked by retry"]
    code, said, _ = ci(capsys, "report", "--results", out, "--json")
    report = (out / "report.md").read_text()  # the dry run writes it beside results.json
    assert "| hidden by a retry | Fail, then Pass on retry (2 attempts) | Pass |" in report
    slot = json.loads(said)["slot_line"]
    flaky = [c["test"] for c in data["cases"] if c["kind"] == "flaky"]
    assert ":x:" in slot and "1 hidden by a retry" in slot and f"{len(flaky)} flaky" in slot


def test_every_way_a_method_runs_again_has_its_attempts_counted(retry_run):
    data = json.loads((retry_run[1] / "results.json").read_text())
    said = {(c["file"], c["test"]): c["modes"]["change"] for c in data["cases"]}
    every_way = {test: said[(EVERY_WAY, test)] for f, test in said if f == EVERY_WAY}
    for test in ("AsyncCustom.test_async", "AsyncCustom.test_sync", "Restored.test_restored"):
        line = every_way[test]
        assert line["outcome"] == "pass" and line["attempts"] == ["fail", "pass"], line
        assert line["detail"].startswith("attempt 1 of 2 failed, the last passed"), line
        assert "the first call fails" in line["detail"]
    around = every_way["AroundEveryHook.test_around"]  # called around every hook: unseen
    assert around["outcome"] == "pass" and around.get("unobserved") is True, around
    assert every_way["Plain.test_once"]["attempts"] == ["pass"]
    assert not every_way["Plain.test_once"].get("unobserved")
    assert every_way["Plain.test_expected"]["attempts"] == ["fail", "fail"]
    assert not every_way["Plain.test_expected"]["detail"].startswith("attempt")
    static = every_way["Plain.test_static"]
    assert static["outcome"] == "fail" and static["attempts"] == ["fail", "fail"], static
    assert "a method without self fails as itself" in static["detail"]
    assert said[(PYTEST_WAY, "AsyncCustom.test_async")]["attempts"] == ["fail", "pass"]
    function = said[(PYTEST_WAY, "test_function")]
    assert function["outcome"] == "pass" and not function.get("unobserved")


def test_files_that_fail_outside_their_tests_are_cases_and_a_reused_out_keeps_nothing(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(REPO)
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "stale.png").write_bytes(b"old")
    (tmp_path / "junit-change.xml").write_text("<stale/>")
    files = [f"{FIXTURES}/{name}.py" for name in ("test_setup_class_fails", "test_exits_early")]
    files.append(f"{FIXTURES}/test_does_not_compile.py")
    argv = ["run", "--out", tmp_path, "--backend", "cpu", *OVERLAY_SIDES, "--tests", *files]
    code, out, err = ci(capsys, *argv)
    assert code == 1 and "ci run: failed" in out and "would refuse" not in err, err
    assert not (tmp_path / "pictures").exists()
    assert ET.parse(tmp_path / "junit-change.xml").getroot().tag == "testsuites"
    data = json.loads((tmp_path / "results.json").read_text())
    cases = {(c["file"].split("/")[-1], c["test"]): c["modes"]["change"] for c in data["cases"]}
    setup = cases[("test_setup_class_fails.py", "TestNeedsAServer.setUpClass")]
    assert setup["outcome"] == "error" and "the server never came up" in setup["detail"]
    whole = "(whole file)"
    assert "exited 3 after 0 test results" in cases[("test_exits_early.py", whole)]["detail"]
    assert "SyntaxError" in cases[("test_does_not_compile.py", whole)]["detail"]
    assert f"{files[0]}::TestNeedsAServer.setUpClass" in out
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = ci(capsys, *argv)
    assert (
        code == 2 and "holds 'notes.txt'" in err and (tmp_path / "notes.txt").read_text() == "mine"
    )


def test_the_machine_commit_and_series_are_recorded(tmp_path, capsys):
    from ci import gitcmd
    from tools.series import seriesdir

    root, series = tmp_path / "root", tmp_path / "series.json"
    (root / "test/registered").mkdir(parents=True)
    (root / "test/registered/test_tiny.py").write_text(registered())
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tiny"]):
        gitcmd.run(args, root, env=IDENTITY)
    described = seriesdir.summary(seriesdir.load(REPO / "patches"))
    series.write_text(json.dumps(described))
    code, out, err = ci(capsys, "run", "--root", root, "--out", tmp_path / "out", "--series",
                        series, "--backend", "cpu", "--change-env", "SIDE=change")  # fmt: skip
    assert code == 0, out + err
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["series"] == {
        "id": described["id"],
        "release": described["release"],
        "patches": described["patches"],
        "fixes": [{"id": f["id"], "patches": f["patches"]} for f in described["fixes"]],
    }
    head = gitcmd.out(["rev-parse", "HEAD"], root)
    assert data["environment"]["git"] == {"commit": head, "dirty": False}
    assert "gpus" in data["environment"]


def test_a_looping_link_is_not_followed_and_results_the_report_would_refuse_fail_the_run(
    tmp_path, capsys
):
    root, out = tmp_path / "root", tmp_path / "out"
    for mode, version in (("unmodified", "0.5.23"), ("change", "0.5.23+" + "x" * 120)):
        (tmp_path / mode / "python/sglang").mkdir(parents=True)
        (tmp_path / mode / "python/sglang/__init__.py").write_text(f"__version__ = {version!r}\n")
    (root / "tests").mkdir(parents=True)
    (root / "tests/test_tiny.py").write_text(registered(imports="import sglang"))
    os.symlink(".", root / "tests" / "loop")
    argv = ["run", "--out", out, "--backend", "cpu", "--root", root, "--tests", "tests"]
    argv += ["--unmodified-src", tmp_path / "unmodified", "--change-src", tmp_path / "change"]
    code, said, err = ci(capsys, *argv)
    assert code == 1, said + err
    assert "tests/loop: a link to a folder: not followed" in err, err
    assert err.count("tests/test_tiny.py: exit 0") == 2, err  # once per side
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "ci report would refuse these results" in errors[0], err
    assert "sides.change.sglang: 127 characters; at most 100" in errors[0], errors
    data = json.loads((out / "results.json").read_text())  # kept: nothing lost
    assert "tests/loop" in [n["file"] for n in data["selection"]["not_run"]]
    assert [c["kind"] for c in data["cases"]] == ["preservation"]


# A helper thread takes the SIGINT (as the kernel may deliver it) once both sides' tests run.
CTRL_C = """
import os, runpy, signal, sys, threading, time
def ctrl_c_to_this_thread():
    while len(os.listdir(os.environ["SLEEPERS"])) < 2:
        time.sleep(0.05)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
threading.Thread(target=ctrl_c_to_this_thread, daemon=True).start()
sys.argv = ["ci", *sys.argv[1:]]
runpy.run_module("ci", run_name="__main__")
"""


def test_ctrl_c_stops_every_test_process_and_prints_one_line(tmp_path):
    sleepers = tmp_path / "pids"
    sleepers.mkdir()
    argv = ["run", "--out", str(tmp_path / "out"), "--backend", "cpu"]
    argv += ["--tests", "tests/fixtures/slow", *OVERLAY_SIDES]
    argv += ["--unmodified-env", f"SLEEPERS={sleepers}", "--change-env", f"SLEEPERS={sleepers}"]
    proc = subprocess.Popen(
        with_default_sigint("-c", CTRL_C, *argv),
        cwd=REPO,
        env=clean_env(SLEEPERS=str(sleepers)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=120)
        pids = [int(p.name) for p in sleepers.iterdir()]
        assert proc.returncode == 130 and len(pids) == 2, err
        assert "Traceback" not in err and err.strip().splitlines()[-1] == (
            "interrupted: every test process this run started is stopped"
        )
        assert until(lambda: not any(alive(pid) for pid in pids)), "a test process survived"
    finally:
        proc.kill()
        for path in sleepers.iterdir():
            if alive(int(path.name)):
                os.kill(int(path.name), signal.SIGKILL)


@pytest.mark.parametrize(
    "args, line",
    [
        (["run", "--out", "/proc/version/out"], "error: --out /proc/version/out: Not a directory"),
        (["run", "--out", "x", "--jobs", "0"], "error: --jobs 0: at least 1"),
        (["run", "--out", "x", "--regressions", sys.executable], "error: --regressions "),
        (["run", "--out", "x", "--tests", "no/such/dir"], "error: --tests no/such/dir: no such"),
        (["run", "--out", "x", "--shard", "2/2"], "error: --shard '2/2': need 0 <= I < N"),
        (["run", "--out", "x", "--change-env", "A"], "error: --change-env 'A': expected NAME="),
        (["run", "--out", "x", "--unmodified-env", "=v"], "error: --unmodified-env '=v': expected"),
        (["run", "--out", "x", "--change-env", "A=1", "--unmodified-env", "A=1"], "error: both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, args, line):
    monkeypatch.chdir(REPO)
    if args[0] == "run" and not any(a.endswith("-env") for a in args):
        args = [*args, *OVERLAY_SIDES]
    code, _, err = ci(capsys, *args)
    assert code == 2 and err.strip().startswith(line) and len(err.strip().splitlines()) == 1, err


def test_a_reader_that_stops_early_ends_ci_run_quietly_with_the_verdicts_code(
    tmp_path, monkeypatch, capsys
):
    read, write = os.pipe()
    os.close(read)
    monkeypatch.setattr(sys, "stdout", os.fdopen(write, "w"))
    monkeypatch.chdir(REPO)
    argv = ["run", "--out", str(tmp_path / "out"), "--backend", "cpu", *OVERLAY_SIDES]
    assert main([*argv, "--tests", f"{FIXTURES}/test_exits_early.py"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_the_version_is_the_installed_release(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out == f"python -m ci {metadata.version('sglang-overlay')}\n"
