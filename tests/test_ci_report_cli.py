"""The report and gate commands: a dry run prints exactly the plan, bad results exit 2, and
the run-ci gate decides from the event."""

import json
from dataclasses import FrozenInstanceError

import pytest
from ci_samples import model

from ci import gate, report
from ci.__main__ import main
from evidence.model import save


def test_report_on_missing_or_broken_results_exits_2(tmp_path, capsys):
    args = ["report", "--repo", "o/r", "--pr", "1", "--results"]
    assert main([*args, str(tmp_path)]) == 2
    (tmp_path / "results.json").write_text("{not json")
    assert main([*args, str(tmp_path)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_report_dry_run_prints_the_slot_comment_and_statuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    save(model(), str(tmp_path))
    code = main(
        ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1", "--sha", "abc1234"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "<!-- slot:dsv4-workspace:start -->:white_check_mark:<!-- slot:dsv4-workspace:end -->"
        in out
    )
    assert "| Case | Kind | sglang 0.5.23 | sglang 0.5.23 + this change |" in out
    assert '"context": "dsv4-workspace/base-b-test-1-gpu-small"' in out
    assert "ghs_never_printed" not in out


def _event(head, base="sgl/sglang", labels=(), action="opened", added=None, sha="b" * 40):
    return {
        "action": action,
        **({"label": {"name": added}} if added else {}),
        "pull_request": {
            "number": 7,
            "head": {"sha": sha, "repo": {"full_name": head} if head else None},
            "base": {"repo": {"full_name": base}},
            "labels": [{"name": n} for n in labels],
        },
    }


def test_gate_runs_branches_and_forks_only_on_the_run_ci_labelled_event():
    assert gate.decide(_event("sgl/sglang")).run
    assert not gate.decide(_event("someone/sglang")).run
    approved = gate.decide(
        _event("someone/sglang", labels=["run-ci"], action="labeled", added="run-ci")
    )
    assert approved.run and approved.sha == "b" * 40 and approved.pr == 7
    assert not gate.decide(_event(None)).run  # deleted fork
    other_label = _event("someone/sglang", labels=["run-ci", "doc"], action="labeled", added="doc")
    assert not gate.decide(other_label).run


def test_a_push_after_the_run_ci_label_needs_a_new_approval():
    pushed = gate.decide(_event("someone/sglang", labels=["run-ci"], action="synchronize"))
    assert not pushed.run and pushed.state == "stale-label"
    reopened = gate.decide(_event("someone/sglang", labels=["run-ci"], action="reopened"))
    assert not reopened.run and reopened.state == "stale-label"
    assert gate.decide(_event("someone/sglang")).state == "missing-label"


def test_gate_cli_writes_github_output(tmp_path, monkeypatch, capsys):
    event = tmp_path / "event.json"
    event.write_text(json.dumps(_event("someone/sglang")))
    output = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    assert main(["gate", "--event", str(event)]) == 0
    assert output.read_text() == f"run=false\nfork=true\nstate=missing-label\nsha={'b' * 40}\n"


def test_a_report_plan_is_frozen_and_is_exactly_what_the_dry_run_prints(tmp_path, capsys):
    save(model(), str(tmp_path))
    request = report.prepare(report.ReportRequest(results=str(tmp_path), repo="o/r", pr=3))
    plan = report.plan(request)
    with pytest.raises(FrozenInstanceError):
        plan.comment = "something else"
    assert main(["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == plan.to_dict()
    assert plan.statuses == () and plan.statuses_skipped  # no --sha: nothing to set them on
