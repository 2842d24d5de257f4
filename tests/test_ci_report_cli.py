"""The report command: a dry run prints exactly the plan, and bad results exit 2."""

import json
from dataclasses import FrozenInstanceError

import pytest
from ci_samples import model, posted

from ci.__main__ import main
from ci.evidence.model import save
from ci.reporter import github_io
from ci.reporter import plan as reporting


def test_report_on_missing_or_broken_results_exits_2(tmp_path, capsys):
    args = ["report", "--repo", "o/r", "--pr", "1", "--results"]
    assert main([*args, str(tmp_path)]) == 2
    (tmp_path / "results.json").write_text("{not json")
    assert main([*args, str(tmp_path)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_report_without_results_names_the_flag_that_is_missing_and_no_other(capsys):
    assert main(["report", "--repo", "o/r", "--pr", "1"]) == 2
    err = capsys.readouterr().err
    assert "--results DIR is required" in err and "--state" not in err  # never given
    assert len(err.splitlines()) == 1


def test_report_dry_run_prints_the_slot_comment_and_statuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    save(posted(), str(tmp_path))
    code = main(
        ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--sha", "a" * 40]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "<!-- slot:dsv4-workspace:start -->:white_check_mark:<!-- slot:dsv4-workspace:end -->"
        in out
    )
    assert "| Case | Verdict | sglang 0.5.23 | sglang 0.5.23 + this change |" in out
    assert '"context": "dsv4-workspace/base-b-test-1-gpu-small"' in out
    assert "ghs_never_printed" not in out


def test_a_report_plan_is_frozen_and_is_exactly_what_the_dry_run_prints(tmp_path, capsys):
    save(model(), str(tmp_path))
    request = reporting.prepare(reporting.ReportRequest(results=str(tmp_path), repo="o/r", pr=3))
    plan = reporting.plan(request)
    with pytest.raises(FrozenInstanceError):
        plan.comment = "something else"
    assert main(["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == plan.to_dict()
    assert plan.statuses == () and plan.statuses_skipped  # no --sha: nothing to set them on


@pytest.mark.parametrize("sha", ["abc1234", "A" * 40, "a" * 41, "a" * 39 + "g", "a" * 40 + "\n"])
def test_a_sha_that_is_not_a_full_commit_id_is_a_usage_error(tmp_path, capsys, sha):
    save(posted(), str(tmp_path))
    args = ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--sha", sha]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "expected a full commit id" in err and len(err.strip().splitlines()) == 1


def test_the_settle_pause_is_settable_and_a_bad_value_is_a_usage_error(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    with github_io._github("o/r", 1, None, "--post") as publisher:
        assert publisher.settle_s == 3.0
    monkeypatch.setenv(github_io.SETTLE_ENV, "0")
    with github_io._github("o/r", 1, None, "--post") as publisher:
        assert publisher.settle_s == 0
    save(posted(), str(tmp_path))
    for bad in ("soon", "-1", "nan", "3600"):
        monkeypatch.setenv(github_io.SETTLE_ENV, bad)
        args = ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--post"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"CI_REPORT_SETTLE_S={bad!r}: seconds from 0 to 60" in err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("summary", [".", "missing/summary.md"], ids=["a-folder", "folder-missing"])
def test_a_summary_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, capsys, summary):
    save(posted(), str(tmp_path))
    args = ["report", "--results", str(tmp_path), "--summary", str(tmp_path / summary)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --summary") and len(err.strip().splitlines()) == 1, err
