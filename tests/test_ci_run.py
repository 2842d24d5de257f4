"""``python -m ci run`` for real: the project's CPU proof on installed sglang with the overlay
off and on (the run the release check makes, ``release_check``), upstream-style files the bot
was not written for, and a pull request's base against its head as two source trees (sglang
0.5.23 from PyPI, with and without the series).
"""

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import overlay_runs
import pytest
import release_check
from conftest import (
    CPU_COMPANION,
    CPU_PROOF,
    FUSED_KV_COMPANION,
    NO_RETRY_DELAY,
    REPO,
    alive,
    clean_env,
    until,
    with_default_sigint,
)
from release_check import TOKEN

FIXTURES = "tests/fixtures/upstream_style"
PYTEST_STYLE = f"{FIXTURES}/test_release_first_pytest.py"
SOURCE_STYLE = f"{FIXTURES}/test_release_first_source.py"


# The overlay's A/B as two sides of `ci run`, as the Makefile and the workflow give them.
OVERLAY_SIDES = ["--unmodified-env", "SGLANG_OVERLAY_DISABLE=1"]
OVERLAY_SIDES += ["--change-env", "SGLANG_OVERLAY_DISABLE=0"]
OFF, ON = "sglang 0.5.23 (SGLANG_OVERLAY_DISABLE=1)", "sglang 0.5.23 (SGLANG_OVERLAY_DISABLE=0)"


def ci_run(out, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", *args]
        + OVERLAY_SIDES,
        cwd=REPO,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )


checked_0_5_23 = release_check.checked_0_5_23
DFLASH_COMPANION = "test/registered/unit/speculative/test_dflash_draft_probs_release_order.py"
DSA_Q8_COMPANION = "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py"
DSV4_Q8_COMPANION = "test/registered/unit/layers/attention/test_dsv4_q8kv8_qpad_release_order.py"
BORN_Q_COMPANION = "test/registered/unit/layers/attention/test_dsa_q8kv8_born_q_release_order.py"


@pytest.fixture(scope="module")
def overlay_run(checked_0_5_23):
    """The proof's A/B on installed sglang, overlay off and on: the release check's ``ci run``."""
    proc, out = checked_0_5_23
    return proc, out / "0.5.23", json.loads((out / "0.5.23" / "results.json").read_text())


def test_the_cpu_tests_reproduce_the_bug_unmodified_and_pass_with_the_overlay(overlay_run):
    proc, _, data = overlay_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = {(c["file"], c["test"].split(".")[-1]): c["kind"] for c in data["cases"]}
    proof, companion = str(CPU_PROOF.relative_to(REPO)), str(CPU_COMPANION.relative_to(REPO))
    fused = str(FUSED_KV_COMPANION.relative_to(REPO))
    dflash = DFLASH_COMPANION
    # the DSV4 proof's 4 and its companion's 2; the fused-KV companion's 3 (patch 0003); the
    # DFlash draft-probability companion's 2 (patch 0005); the DSA q8kv8 companion's 3 (patch
    # 0007), the DSV4 q8kv8 one's 1 (patch 0009) and the DSA born-q one's 3 (patch 0011)
    assert sorted(kinds.values()).count("regression") == 4 + 2 + 3 + 2 + 3 + 1 + 3
    assert kinds[(proof, "test_smaller_request_reuses_storage")] == "preservation"
    assert (
        sorted(k for (f, _), k in kinds.items() if f == companion)
        == ["preservation"] * 3 + ["regression"] * 2
    )
    assert (
        sorted(k for (f, _), k in kinds.items() if f == fused)
        == ["preservation"] + ["regression"] * 3
    )
    assert (
        sorted(k for (f, _), k in kinds.items() if f == dflash)
        == ["preservation"] * 2 + ["regression"] * 2
    )
    for path, counts in (
        (DSA_Q8_COMPANION, (2, 3)),
        (DSV4_Q8_COMPANION, (1, 1)),
        (BORN_Q_COMPANION, (3, 3)),
    ):
        assert (
            sorted(k for (f, _), k in kinds.items() if f == path)
            == ["preservation"] * counts[0] + ["regression"] * counts[1]
        )
    assert data["verdict"] == "ok" and sorted(f["path"] for f in data["files"]) == sorted(
        [proof, companion, fused, dflash, DSA_Q8_COMPANION, DSV4_Q8_COMPANION, BORN_Q_COMPANION]
    )
    grow = next(c for c in data["cases"] if c["file"] == proof and "grow" in c["test"])
    assert "peaked at 160.0 MiB" in grow["modes"]["unmodified"]["detail"]
    # The proof publishes the live CPU memory it measured: each side's peak, as on CUDA.
    peaks = {m: grow["modes"][m]["peak_mib"] for m in ("unmodified", "change")}
    assert peaks == {"unmodified": 160.0, "change": 96.0}
    # The CUDA test under test/registered did not run here, and the results say why.
    assert {
        "file": "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py",
        "why": "registered for cuda only",
    } in data["selection"]["not_run"]
    # As sglang's CI runs them: every regression failed its retry too.
    for case in data["cases"]:
        if case["kind"] == "regression":
            assert case["modes"]["unmodified"]["attempts"] == ["fail", "fail"], case["test"]


def test_the_report_judges_the_real_run_as_ci_run_did(overlay_run):
    from ci.evidence import shards

    _, out, data = overlay_run
    model = shards.load(str(out))
    assert (model.verdict, list(model.reasons)) == (data["verdict"], data["reasons"]) == ("ok", [])


def test_the_sides_are_named_by_what_they_ran(overlay_run):
    proc, out, data = overlay_run
    labels = {mode: side["label"] for mode, side in data["sides"].items()}
    assert labels == {"unmodified": OFF, "change": ON}
    settings = {m: s["env"] for m, s in data["environment"]["sides"].items()}
    assert settings == {
        "unmodified": {"SGLANG_OVERLAY_DISABLE": "1"},
        "change": {"SGLANG_OVERLAY_DISABLE": "0"},
    }


def test_junit_logs_and_def_lines_come_with_the_results(overlay_run):
    _, out, data = overlay_run
    unmodified = ET.parse(out / "junit-unmodified.xml").getroot()
    assert unmodified.get("name") == f"{OFF} (cpu)"
    errors = {s.get("name"): s.get("errors") for s in unmodified.findall("testsuite")}
    assert errors == {
        str(CPU_COMPANION.relative_to(REPO)): "2",
        str(CPU_PROOF.relative_to(REPO)): "4",
        str(FUSED_KV_COMPANION.relative_to(REPO)): "3",
        DFLASH_COMPANION: "2",
        "test/registered/unit/layers/attention/test_dsa_q8kv8_release_order.py": "3",
        "test/registered/unit/layers/attention/test_dsv4_q8kv8_qpad_release_order.py": "1",
        BORN_Q_COMPANION: "3",
    }
    changed = ET.parse(out / "junit-change.xml").getroot().findall("testsuite")
    assert [s.get("errors") for s in changed] == ["0"] * 7
    for case in data["cases"]:
        source = (REPO / case["file"]).read_text().splitlines()
        name = case["test"].split(".")[-1]
        assert source[case["line"] - 1].strip().startswith(f"def {name}("), name
    proof = next(f for f in data["files"] if f["path"] == str(CPU_PROOF.relative_to(REPO)))
    assert (
        "not less than or equal to 128" in (out / proof["modes"]["unmodified"]["log"]).read_text()
    )


def test_the_token_never_reaches_output_or_artifacts(overlay_run):
    proc, out, _ = overlay_run
    assert TOKEN not in proc.stdout + proc.stderr
    for path in out.parent.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path


def test_a_reused_out_folder_keeps_nothing_of_the_last_run_and_a_foreign_one_is_refused(tmp_path):
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "stale.png").write_bytes(b"old")
    (tmp_path / "junit-change.xml").write_text("<stale/>")
    proc = ci_run(tmp_path, "--tests", f"{FIXTURES}/test_exits_early.py", "--modes", "change")
    assert not (tmp_path / "pictures").exists()
    assert ET.parse(tmp_path / "junit-change.xml").getroot().tag == "testsuites"
    assert proc.returncode == 1
    (tmp_path / "notes.txt").write_text("mine")
    proc = ci_run(tmp_path, "--tests", f"{FIXTURES}/test_exits_early.py")
    assert proc.returncode == 2 and "holds 'notes.txt'" in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_upstream_style_files_that_fail_outside_their_tests_are_reported_not_crashed_on(
    tmp_path,
):
    hostile = [f"{FIXTURES}/{name}" for name in ("test_setup_class_fails.py",)]
    hostile += [f"{FIXTURES}/test_exits_early.py", f"{FIXTURES}/test_does_not_compile.py"]
    proc = ci_run(tmp_path, "--tests", *hostile, "--modes", "change")
    assert proc.returncode == 1, proc.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    cases = {(c["file"].split("/")[-1], c["test"]): c["modes"]["change"] for c in data["cases"]}
    assert cases[("test_setup_class_fails.py", "TestNeedsAServer.setUpClass")]["outcome"] == "error"
    assert (
        "the server never came up"
        in cases[("test_setup_class_fails.py", "TestNeedsAServer.setUpClass")]["detail"]
    )
    assert (
        "exited 3 after 0 test results" in cases[("test_exits_early.py", "(whole file)")]["detail"]
    )
    assert "SyntaxError" in cases[("test_does_not_compile.py", "(whole file)")]["detail"]
    assert data["verdict"] == "failed" and "ci run: failed" in proc.stdout
    # Test ids as plain text, as pytest takes them: no invisible joiner inside "::".
    assert f"{FIXTURES}/test_setup_class_fails.py::TestNeedsAServer.setUpClass" in proc.stdout
    # The report's check of a record finds nothing in one ci run wrote, crashes and all, but
    # that it compares nothing: one side only.
    from ci.evidence import judge
    from ci.evidence.model import Results

    record = Results.from_json(data)
    assert judge.record_problems(record, judge.load_patterns(judge.REGRESSIONS)) == [
        "no unmodified side: an A/B needs both"
    ]


def _ci_run_in_pool(out, *args):
    argv = [sys.executable, "-m", "ci", "run", "--out", str(out), "--backend", "cpu", *args]
    env = clean_env(PYTHONPATH=str(NO_RETRY_DELAY))
    return overlay_runs.POOL.run(argv, timeout=900, cwd=REPO, env=env)


# Started with the shared processes (``overlay_runs``), so it runs while other tests do: sglang
# 0.5.23 materialised, and a second copy with the series applied by git am (as
# ``series_fixtures`` makes them); the CPU proof, an upstream-style pytest file and the fused-KV
# fix's CPU companion base against head; then head against head, listing the regression of a
# file that reads the module's source (a void proof, in processes that never import sglang).
@overlay_runs.job("trees_runs")
def _trees_runs(directory):
    from ci import gitcmd
    from tools.series import base, check, seriesdir

    series = seriesdir.load()
    base_tree = base.materialize(series.base.version, directory / "base" / "sglang")
    head = base.materialize(series.base.version, directory / "head" / "sglang")
    check.am_series(series, head, env=gitcmd.TOOL_IDENTITY)
    # the trees are the sides: the runtime overlay off on both
    sides = ["--unmodified-src", str(base_tree), "--change-src", str(head)]
    sides += [
        "--unmodified-env",
        "SGLANG_OVERLAY_DISABLE=1",
        "--change-env",
        "SGLANG_OVERLAY_DISABLE=1",
    ]
    fused_kv = str(FUSED_KV_COMPANION.relative_to(REPO))
    proc = _ci_run_in_pool(
        directory / "out", "--tests", "test/proofs", PYTEST_STYLE, fused_kv, *sides
    )
    listed = directory / "regressions.txt"
    listed.write_text(f"{SOURCE_STYLE}::*.test_replacement_releases_*\n")
    void_args = ["--tests", SOURCE_STYLE, "--regressions", str(listed)]
    both_head = ["--unmodified-src", str(head), "--change-src", str(head), "--change-env", "A=1"]
    void = _ci_run_in_pool(directory / "void", *void_args, *both_head)
    return {
        "trees": (base_tree, head),
        "run": (proc, json.loads((directory / "out" / "results.json").read_text())),
        "void": (void, json.loads((directory / "void" / "results.json").read_text())),
    }


trees_runs = overlay_runs.fixture("trees_runs")


@pytest.fixture(scope="module")
def trees_run(trees_runs):
    return trees_runs["run"]


def test_a_pull_requests_base_against_its_head_proves_its_tests(trees_runs):
    proc, data = trees_runs["run"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ci run: ok: 8 regression, 5 preservation" in proc.stdout
    kinds = {c["test"]: c["kind"] for c in data["cases"] if c["file"] == PYTEST_STYLE}
    assert kinds == {
        "test_replacement_allocates_after_releasing_the_old_scratch": "regression",
        "test_a_request_that_fits_reuses_the_scratch[4]": "preservation",
        "test_a_request_that_fits_reuses_the_scratch[8]": "preservation",
    }
    sides = data["sides"]
    assert not sides["unmodified"]["overlay"] and not sides["change"]["overlay"]
    assert sides["unmodified"]["commit"] != sides["change"]["commit"]
    assert sides["change"]["label"] == f"sglang 0.5.23 @ {sides['change']['commit'][:12]}"
    for mode, tree in zip(("unmodified", "change"), trees_runs["trees"], strict=True):
        path = data["environment"]["modes"][mode]["sglang_path"]
        assert path.startswith(str(tree)), (mode, path)


def test_the_fused_kv_companion_fails_unmodified_on_the_retry_too_and_passes_with_the_series(
    trees_run,
):
    proc, data = trees_run
    fused_kv = str(FUSED_KV_COMPANION.relative_to(REPO))
    cases = {c["test"].split(".")[-1]: c for c in data["cases"] if c["file"] == fused_kv}
    regressions = {name for name, case in cases.items() if case["kind"] == "regression"}
    assert regressions == {
        "test_growing_releases_the_old_workspaces_before_allocating",
        "test_changing_dtype_releases_the_old_workspaces_before_allocating",
        "test_a_failed_dtype_change_leaves_workspaces_of_the_next_batchs_dtype",
    }
    assert len(cases) == 4 and all(
        c["kind"] == "preservation" for n, c in cases.items() if n not in regressions
    )
    # As sglang's CI runs it (SGLANG_IS_IN_CI=true): CustomTestCase's retry fails as well.
    for name in regressions:
        assert cases[name]["modes"]["unmodified"]["attempts"] == ["fail", "fail"], name
        detail = cases[name]["modes"]["unmodified"]["detail"]
        # the assertion itself, not the retry's wrapper around it
        assert "workspaces were alive" in detail or "torch.bfloat16, torch.float16" in detail
    assert data["environment"]["upstream_ci"]["SGLANG_IS_IN_CI"] == "true"


def test_the_series_and_the_overlay_are_the_same_fix_by_the_same_proof(trees_run, overlay_run):
    def outcomes(data):
        return {
            (c["test"], mode): c["modes"][mode]["outcome"]
            for c in data["cases"]
            if c["file"].startswith("test/proofs/")
            for mode in ("unmodified", "change")
        }

    by_series, by_overlay = outcomes(trees_run[1]), outcomes(overlay_run[2])
    assert by_series == by_overlay and len(by_series) == 12


def test_a_run_whose_base_already_has_the_change_is_void_and_exits_1(trees_runs):
    proc, data = trees_runs["void"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # The file reads sglang's source and never imports it, so its processes saw no version.
    assert proc.stdout.splitlines()[-1] == (
        "ci run: the bug did not reproduce: 1 listed regressions pass on "
        "sglang (version unknown) @ "
        f"{data['sides']['unmodified']['commit'][:12]} "
        "(TestReserveSource.test_replacement_releases_the_old_scratch_before_allocating); "
        "is the change already in it?"
    )


RETRIED = f"{FIXTURES}/test_retried_in_ci.py"


# sglang's own CustomTestCase under SGLANG_IS_IN_CI (the default): a test whose state lives in
# setUp fails unmodified at first and passes on the retry, a plain regression beside it, and a
# test that passes with the change only on its retry.
@overlay_runs.job("retry_run")
def _retry_run(directory):
    listed = directory / "regressions.txt"
    listed.write_text(f"{RETRIED}::*.test_state_built_*\n{RETRIED}::*.test_fails_every_*\n")
    args = ["--tests", RETRIED, "--regressions", str(listed), *OVERLAY_SIDES]
    proc = _ci_run_in_pool(directory / "out", *args)
    return proc, directory / "out"


retry_run = overlay_runs.fixture("retry_run")


def test_a_regression_that_passes_on_upstreams_retry_is_masked_and_fails_the_run(retry_run):
    proc, out = retry_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    kinds = {
        c["test"].split(".")[-1]: c["kind"]
        for c in json.loads((out / "results.json").read_text())["cases"]
    }
    assert kinds == {
        "test_state_built_in_setup_passes_on_the_retry": "masked-by-retry",
        "test_fails_every_attempt_unmodified": "regression",
        "test_flaky_with_the_change": "flaky",
    }
    masked = [line for line in proc.stdout.splitlines() if "masked by retry" in line]
    assert masked == [
        f"ci run: 1 masked by retry on {OFF}: upstream's CI would pass them on the "
        "unmodified code, failing first and passing on the retry "
        "(TestRetriedInCI.test_state_built_in_setup_passes_on_the_retry)"
    ]
    assert any(line.startswith(f"ci run: 1 flaky with {ON}") for line in proc.stdout.splitlines())


def test_every_attempt_is_recorded_and_said_in_words_everywhere(retry_run):
    _, out = retry_run
    data = json.loads((out / "results.json").read_text())
    modes = {c["test"].split(".")[-1]: c["modes"] for c in data["cases"]}
    masked = modes["test_state_built_in_setup_passes_on_the_retry"]["unmodified"]
    assert masked["outcome"] == "pass" and masked["attempts"] == ["fail", "pass"]
    assert masked["detail"].startswith("attempt 1 of 2 failed, the last passed:")
    assert "the first attempt fails unmodified" in masked["detail"]
    assert modes["test_fails_every_attempt_unmodified"]["unmodified"]["attempts"] == [
        "fail",
        "fail",
    ]
    assert modes["test_fails_every_attempt_unmodified"]["change"]["attempts"] == ["pass"]
    assert data["environment"]["upstream_ci"]["SGLANG_IS_IN_CI"] == "true"
    plan = subprocess.run(
        [sys.executable, "-m", "ci", "report", "--results", str(out), "--json"],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = (out / "report.md").read_text()  # the dry run writes it beside results.json
    assert "| hidden by a retry | Fail, then Pass on retry (2 attempts) | Pass |" in report
    junit = ET.parse(out / "junit-unmodified.xml").getroot()
    flaky = junit.findall(
        ".//testcase[@name='test_state_built_in_setup_passes_on_the_retry']/flakyFailure"
    )
    assert [f.get("message").split(":")[0] for f in flaky] == ["masked by retry"]
    slot = json.loads(plan.stdout)["slot_line"]
    assert ":x:" in slot and "1 hidden by a retry" in slot and "1 flaky" in slot


def test_ctrl_c_stops_every_test_process_and_prints_one_line(tmp_path):
    sleepers = tmp_path / "pids"
    sleepers.mkdir()
    proc = subprocess.Popen(
        with_default_sigint("-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend", "cpu")
        + ["--tests", "tests/fixtures/slow", *OVERLAY_SIDES]
        + ["--unmodified-env", f"SLEEPERS={sleepers}", "--change-env", f"SLEEPERS={sleepers}"],
        cwd=REPO,
        env=clean_env(SLEEPERS=str(sleepers)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert until(lambda: len(list(sleepers.iterdir())) == 2), "both modes started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        pids = [int(p.name) for p in sleepers.iterdir()]
        assert proc.returncode == 130, err
        assert "Traceback" not in err and err.strip().splitlines()[-1] == (
            "interrupted: every test process this run started is stopped"
        )
        assert until(lambda: not any(alive(pid) for pid in pids)), "a test process survived"
    finally:
        proc.kill()
        for path in sleepers.iterdir():
            if alive(int(path.name)):
                os.kill(int(path.name), signal.SIGKILL)


# The kernel hands a process's SIGINT to any thread that does not block it; Python raises it only
# in the main thread, when that thread runs. Here a helper thread takes it.
CTRL_C_TO_ANOTHER_THREAD = """
import os, signal, sys, threading, time
from ci.runner import launch, sides
sleepers = sys.argv[1]
def ctrl_c_to_this_thread():
    while len(os.listdir(sleepers)) < 2:
        time.sleep(0.05)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
threading.Thread(target=ctrl_c_to_this_thread, daemon=True).start()
env = dict(sides.test_environment(), SLEEPERS=sleepers)
try:
    launch.run_all(["tests/fixtures/slow/test_sleeps.py"], {"unmodified": env, "change": env},
                   ".", 600, 2, print, sys.argv[2])
except KeyboardInterrupt:
    print("interrupted")
"""


def test_ctrl_c_that_the_kernel_hands_to_another_thread_still_stops_the_run(tmp_path):
    # Before, the main thread waited for the next file without a timeout: it raised the
    # KeyboardInterrupt only when a test process ended (here after 300 s).
    sleepers = tmp_path / "pids"
    sleepers.mkdir()
    proc = subprocess.Popen(
        with_default_sigint("-c", CTRL_C_TO_ANOTHER_THREAD, str(sleepers), str(tmp_path)),
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
        pids = [int(p.name) for p in sleepers.iterdir()]
        assert len(pids) == 2 and out.splitlines()[-1] == "interrupted", err
        assert until(lambda: not any(alive(pid) for pid in pids)), "a test process survived"
    finally:
        proc.kill()
        for path in sleepers.iterdir():
            if alive(int(path.name)):
                os.kill(int(path.name), signal.SIGKILL)


@pytest.mark.parametrize(
    "args, line",
    [
        (["report", "--results", "/nonexistent"], "error: --results /nonexistent: no such folder"),
        (
            ["report", "--results", ".", "--summary", "/nonexistent/x.md"],
            "error: --summary /nonexistent/x.md: its folder does not exist",
        ),
        (
            ["run", "--out", "/dev/null", "--tests", PYTEST_STYLE, *OVERLAY_SIDES],
            "error: --out /dev/null: not a",
        ),
        (["run", "--out", "x", "--jobs", "0"], "error: --jobs 0: at least 1"),
        (
            ["run", "--out", "/proc/version/out", *OVERLAY_SIDES],
            "error: --out /proc/version/out: Not a directory",
        ),
        (
            ["run", "--out", "x", "--tests", "no/such/dir", *OVERLAY_SIDES],
            "error: --tests no/such/dir: no such",
        ),
        (
            ["run", "--out", "x", "--change-env", "A"],
            "error: --change-env 'A': expected NAME=VALUE",
        ),
        (["run", "--out", "x"], "error: both sides are the same"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, line):
    proc = subprocess.run(
        [sys.executable, "-m", "ci", *args],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().startswith(line), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_reader_that_stops_early_ends_ci_run_quietly_with_the_verdicts_code(
    tmp_path, monkeypatch, capsys
):
    # `ci run ... | head -1`: the reader is gone before the summary is printed.
    from ci.__main__ import main

    read, write = os.pipe()
    os.close(read)
    monkeypatch.setattr(sys, "stdout", os.fdopen(write, "w"))
    argv = ["run", "--out", str(tmp_path / "out"), "--backend", "cpu", "--modes", "change"]
    assert main([*argv, "--tests", f"{FIXTURES}/test_exits_early.py"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_ci_run_and_the_watch_check_start_where_no_github3_is_installed(tmp_path):
    # The GPU test job and the release watch's check job install no github3 (only the report
    # jobs do): their commands must not import it.
    blocked = "import runpy, sys; sys.modules['github3'] = None; sys.argv = sys.argv[1:]; "
    blocked += "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
    for args in (
        ["ci", "run", "--out", str(tmp_path / "out"), "--tests", f"{FIXTURES}/test_exits_early.py"]
        + OVERLAY_SIDES,
        ["tools.releases", "watch", "--help"],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", blocked, *args],
            cwd=REPO,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "github3" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 1), proc.stderr


def test_the_jobs_retry_at_once_with_sglangs_attempts(tmp_path):
    # A module of sglang's name whose retry says how it was called and sleeps as asked.
    common = tmp_path / "sglang/srt/utils/common.py"
    common.parent.mkdir(parents=True)
    for package in ("sglang", "sglang/srt", "sglang/srt/utils"):
        (tmp_path / package / "__init__.py").write_text("")
    common.write_text(
        "import time\n"
        "def retry(fn, max_retry, initial_delay=2.0, max_delay=60.0, should_retry=None):\n"
        "    print(max_retry, initial_delay, max_delay, should_retry)\n"
        "    time.sleep(initial_delay)\n"
        "    return fn()\n"
    )
    code = (
        "from sglang.srt.utils.common import retry\nprint(retry(lambda: 'ran', 1, should_retry=3))"
    )
    path = os.pathsep.join([str(NO_RETRY_DELAY), str(tmp_path)])
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "1 0.0 0.0 3\nran\n"), proc.stderr
