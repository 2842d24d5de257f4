"""The report command: a dry run prints exactly the plan; bad usage is one line and exit 2."""

import pytest
from ci_samples import model, posted

from ci.__main__ import main
from ci.evidence.model import save
from ci.reporter import github_io
from ci.reporter import plan as reporting


def test_a_dry_run_prints_exactly_the_plan_and_never_the_token(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    save(posted(), str(tmp_path))
    args = ["report", "--results", str(tmp_path), "--repo", "o/r", "--pr", "1"]
    assert main([*args, "--sha", "a" * 40]) == 0
    out = capsys.readouterr().out
    assert (
        "<!-- slot:dsv4-workspace:start -->:white_check_mark:<!-- slot:dsv4-workspace:end -->"
        in out
    )
    assert "| Case | Verdict | sglang 0.5.23 | sglang 0.5.23 + this change |" in out
    assert '"context": "dsv4-workspace/base-b-test-1-gpu-small"' in out
    assert "ghs_never_printed" not in out
    request = reporting.prepare(reporting.ReportRequest(results=(str(tmp_path),), repo="o/r", pr=1))
    plan = reporting.plan(request)
    assert main([*args, "--json"]) == 0
    assert capsys.readouterr().out == reporting.dry_run_text(plan, as_json=True)
    assert plan.statuses == ()  # no --sha: nothing to set them on


USAGE = {
    "no-results-flag": ([], {}, "--results DIR is required"),
    "results-not-json": (["--results", "{bad}"], {}, "not JSON"),
    "results-missing": (["--results", "{tmp}/none"], {}, "error: --results {tmp}/none: no such"),
    "empty-results-folder": (["--results", "{empty}"], {}, "results.json"),
    "short-sha": (["--sha", "abc1234"], {}, "expected a full commit id"),
    "sha-with-a-line-break": (["--sha", "a" * 40 + "\n"], {}, "expected a full commit id"),
    "upper-case-sha": (["--sha", "A" * 40], {}, "expected a full commit id"),
    "settle-as-text": (["--post"], {github_io.SETTLE_ENV: "soon"}, "CI_REPORT_SETTLE_S='soon'"),
    "settle-an-hour": (["--post"], {github_io.SETTLE_ENV: "3600"}, "seconds from 0 to 60"),
    "summary-a-folder": (["--summary", "{tmp}"], {}, "error: --summary"),
    "summary-folder-missing": (["--summary", "{tmp}/no/s.md"], {}, "No such file or directory"),
    "post-without-a-token": (["--post"], {"GITHUB_TOKEN": None}, "needs a token in GITHUB_TOKEN"),
}


@pytest.mark.parametrize("args, env, said", USAGE.values(), ids=USAGE.keys())
def test_bad_usage_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, env, said):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_printed")
    for key, value in env.items():
        monkeypatch.setenv(key, value) if value else monkeypatch.delenv(key)
    good, bad, empty = (tmp_path / name for name in ("good", "bad", "empty"))
    for folder in (good, bad, empty):
        folder.mkdir()
    save(model(), str(good))
    (bad / "results.json").write_text("{not json")
    args = [a.format(bad=bad, empty=empty, tmp=tmp_path) for a in args]
    results = [] if "--results" in args or not args else ["--results", str(good)]
    assert main(["report", "--repo", "o/r", "--pr", "1", *results, *args]) == 2
    err = capsys.readouterr().err
    assert said.format(tmp=tmp_path) in err and len(err.strip().splitlines()) == 1, err


def test_a_dry_run_beside_results_it_cannot_write_to_still_prints_the_plan(tmp_path, capsys):
    save(posted(), str(tmp_path))
    (tmp_path / "report.md").mkdir()  # as a read-only folder would refuse it
    assert main(["report", "--results", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "## sticky comment" in out
    assert err.startswith("note: report.md not written") and len(err.splitlines()) == 1, err
