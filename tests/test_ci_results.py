"""Reading the result channel, judging cases, results.json validation, env scrubbing, gating."""

import json
import subprocess
from dataclasses import FrozenInstanceError, replace

import pytest
from ci_samples import FILE, evidence, file_run, model, workspace_runs

from ci import case_result, environment, report, results, runner
from ci.__main__ import main


def test_each_case_comes_from_its_result_line_with_evidence_traceback_and_skip_reason():
    trace = "Traceback (most recent call last):\n  AssertionError: 'oom' != 'pass'"
    run = file_run(
        "change",
        [
            (
                "test_grow",
                "TestCPU",
                [evidence("grow", "oom", detail="can't allocate")],
                "fail",
                trace,
            ),
            ("test_keep", "TestCPU", [], "pass", None),
            ("setUpClass", "TestCUDA", [], "skip", "no CUDA device"),
        ],
    )
    run = replace(run, output="nothing here is read\n")
    m = results.build([run], {}, "cpu", ["change"], {}, {}, regression_patterns=[])
    grow, keep, skipped = (c.modes["change"] for c in m.cases)
    assert [c.case_id for c in m.cases] == [
        "TestCPU.test_grow",
        "TestCPU.test_keep",
        "TestCUDA.setUpClass",
    ]
    assert (grow.outcome, grow.evidence[0]["outcome"], grow.detail) == (
        "fail",
        "oom",
        "can't allocate",
    )
    assert "AssertionError: 'oom' != 'pass'" in grow.excerpt and grow.duration_s == 0.5
    assert (keep.outcome, keep.evidence, keep.excerpt) == ("pass", (), "")
    assert (skipped.outcome, skipped.detail) == ("skip", "no CUDA device")
    assert m.files[0].modes["change"]["ran"] == 3


def test_a_line_that_is_not_a_result_is_a_whole_file_error_that_names_it():
    run = file_run("change", [("test_a", "T", [], "pass", None)])
    run = replace(run, channel=run.channel + '{"test": "T.test_b", "outcome": "great"}\n')
    m = results.build([run], {}, "cpu", ["change"], {}, {}, regression_patterns=[])
    outcomes = {c.case_id: c.modes["change"].outcome for c in m.cases}
    assert outcomes == {"T.test_a": "pass", results.FILE_CASE: "error"}
    assert "result line 2: result line 2.outcome: 'great' is not one of" in (
        m.cases[1].modes["change"].detail
    )
    assert not m.change_ok()


def test_a_process_that_dies_inside_a_case_reports_the_cases_before_and_a_whole_file_error():
    run = file_run("change", [("test_a", "T", [], "pass", None)], returncode=-11)
    run = replace(run, output=run.output + "test_b (__main__.T.test_b) ... Segmentation fault\n")
    m = results.build([run], {}, "cpu", ["change"], {}, {}, regression_patterns=[])
    outcomes = {c.case_id: c.modes["change"].outcome for c in m.cases}
    assert outcomes == {"T.test_a": "pass", results.FILE_CASE: "error"}
    assert "Segmentation fault" in m.cases[1].modes["change"].excerpt
    assert not m.change_ok()


def test_a_file_that_crashes_before_any_test_is_one_error_case_with_the_log_tail():
    runs = [runner.FileRun(FILE, "change", 1, 1.0, False, "ImportError: no sglang\n")]
    m = results.build(runs, {}, "cpu", ["change"], {}, {}, regression_patterns=[])
    (case,) = m.cases
    assert case.case_id == results.FILE_CASE and case.kind == "broken"
    assert "ImportError" in case.modes["change"].excerpt


def test_a_timeout_fails_the_run_and_flags_the_file():
    run = replace(file_run("change", [("test_a", "T", [], "pass", None)]), timed_out=True)
    m = results.build([run], {}, "cpu", ["change"], {}, {}, regression_patterns=[])
    assert not m.change_ok() and "timed out (change)" in m.files[0].flags


def test_a_case_result_round_trips_through_its_fields_and_names_a_bad_field():
    record = case_result.CaseResult("T.test_a", case_result.Outcome.SKIP, 0.1, "why", ({"a": 1},))
    assert case_result.CaseResult.from_dict(record.to_dict()) == record
    assert record.to_dict()["outcome"] == "skip"
    with pytest.raises(case_result.RecordError, match=r"result.duration_s: expected a number"):
        case_result.CaseResult.from_dict({"test": "T.a", "outcome": "pass", "duration_s": "1"})
    with pytest.raises(case_result.RecordError, match="missing field 'outcome'"):
        case_result.CaseResult.from_dict({"test": "T.a"})


def test_kinds_regression_preservation_and_file_flag_when_nothing_reproduces():
    m = model()
    assert [c.kind for c in m.cases] == ["regression", "preservation"]
    assert m.files[0].flags == [] and m.change_ok()
    void = model(workspace_runs(grow_unmodified="pass"))
    assert [c.kind for c in void.cases] == ["not-reproduced", "preservation"]
    assert void.files[0].flags == [results.FLAG_NOT_REPRODUCED]
    assert void.change_ok()  # the change itself passes; the report carries the warning


def test_results_round_trip_through_json(tmp_path):
    m = model()
    results.save(m, str(tmp_path))
    again = results.load(str(tmp_path))
    assert again.to_json() == m.to_json()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("cases"), "missing field 'cases'"),
        (lambda d: d.update(schema=99), "schema: 99"),
        (
            lambda d: d["cases"][0]["modes"]["change"].update(outcome="great"),
            "cases[0].modes.change.outcome",
        ),
        (lambda d: d["cases"][1].update(kind="meh"), "cases[1].kind"),
        (lambda d: d["cases"][0]["modes"]["change"].update(peak_mib="96"), "peak_mib"),
    ],
)
def test_malformed_results_name_the_field(tmp_path, mutate, message):
    data = model().to_json()
    mutate(data)
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(results.ResultsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        results.load(str(tmp_path))


def test_report_on_missing_or_broken_results_exits_2(tmp_path, capsys):
    args = ["report", "--repo", "o/r", "--pr", "1", "--results"]
    assert main([*args, str(tmp_path)]) == 2
    (tmp_path / "results.json").write_text("{not json")
    assert main([*args, str(tmp_path)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_report_dry_run_prints_the_slot_comment_and_statuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    results.save(model(), str(tmp_path))
    code = main(
        ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--sha", "abc1234"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "<!-- slot:dsv4-workspace:start -->:white_check_mark:<!-- slot:dsv4-workspace:end -->"
        in out
    )
    assert "| Case | Kind | Unmodified main | This change |" in out
    assert '"context": "dsv4-workspace/base-b-test-1-gpu-small"' in out
    assert "ghs_never_printed" not in out


def test_test_processes_never_see_tokens_or_secrets():
    base = {
        "GITHUB_TOKEN": "x",
        "ACTIONS_RUNTIME_TOKEN": "y",
        "MY_SECRET": "z",
        "PATH": "/bin",
        "SGLANG_OVERLAY_DISABLE": "1",
    }
    change = runner.mode_env("change", base=base)
    assert change == {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "MALLOC_ARENA_MAX": "1"}
    assert runner.mode_env("unmodified", base=base)["SGLANG_OVERLAY_DISABLE"] == "1"
    src = runner.mode_env("change", "/src/sglang", base={"PYTHONPATH": "/tmp/site"})
    assert src["PYTHONPATH"] == "/src/sglang/python:/tmp/site"
    assert src["SGLANG_OVERLAY_DISABLE"] == "1"


def test_bad_shard_and_modes_are_usage_errors(tmp_path):
    assert main(["run", "--out", str(tmp_path), "--backend", "cpu", "--shard", "2/2"]) == 2
    assert main(["run", "--out", str(tmp_path), "--backend", "cpu", "--modes", "both"]) == 2
    assert main(["run", "--out", str(tmp_path), "--backend", "cpu", "--suite", "no-such"]) == 2


def test_a_project_inside_another_repository_reports_no_commit(tmp_path):
    def git(*args, cwd=tmp_path):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    project = tmp_path / "project"
    project.mkdir()
    assert environment.git_commit(str(project)) == {"commit": None, "dirty": None}
    assert len(environment.git_commit(str(tmp_path))["commit"]) == 40


def test_a_report_plan_is_frozen_and_is_exactly_what_the_dry_run_prints(tmp_path, capsys):
    results.save(model(), str(tmp_path))
    request = report.prepare(report.ReportRequest(results=str(tmp_path), repo="o/r", pr=3))
    plan = report.plan(request)
    with pytest.raises(FrozenInstanceError):
        plan.comment = "something else"
    assert main(["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == plan.to_dict()
    assert plan.statuses == () and plan.statuses_skipped  # no --sha: nothing to set them on


def test_a_judged_file_is_frozen_with_its_flags_set_when_it_is_built():
    run = replace(file_run("change", [("test_a", "T", [], "pass", None)]), timed_out=True)
    (judged,) = results.build([run], {}, "cpu", ["change"], {}, {}, regression_patterns=[]).files
    assert judged.flags == ["timed out (change)"]
    with pytest.raises(FrozenInstanceError):
        judged.flags = []
    loaded = results.Results.from_json(json.loads(json.dumps(model().to_json()))).files[0]
    with pytest.raises(FrozenInstanceError):
        loaded.suite = "another"


def test_results_are_frozen_and_a_replace_with_lists_still_stores_tuples():
    m = model()
    with pytest.raises(FrozenInstanceError):
        m.backend = "cuda"
    with pytest.raises(FrozenInstanceError):
        m.cases = []
    again = replace(m, cases=[m.cases[0]], files=list(m.files), modes=["change"])
    assert again.cases == (m.cases[0],) and isinstance(again.files, tuple)
    assert again.modes == ("change",)
    assert again.to_json()["cases"] == [m.to_json()["cases"][0]]  # lists again, as in JSON
