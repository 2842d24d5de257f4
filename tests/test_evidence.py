"""The evidence contract: the result channel, judging, the verdict, and results.json as
untrusted input (every shape and bound checked once, at load)."""

import json
import re
from dataclasses import FrozenInstanceError, replace

import ci_samples
import pytest
from ci_samples import (
    CLS,
    FILE,
    GROW,
    REUSE,
    channel_line,
    file_run,
    model,
    sides,
    workspace_runs,
)
from conftest import REPO

from ci.evidence import judge
from ci.evidence.model import (
    FILE_CASE,
    EvidenceError,
    FixId,
    Outcome,
    Results,
    SeriesId,
    TestResult,
    load,
    read_channel,
    save,
)


def _build(runs, patterns=(), modes=("unmodified", "change")):
    chosen = {m: s for m, s in sides().items() if m in modes}
    return judge.build(runs, "cuda", chosen, {FILE: "s"}, patterns)


def test_each_result_comes_from_its_channel_line_and_nothing_from_the_log():
    run = file_run(
        "change",
        [
            ("test_grow", "fail", "Traceback ...\nAssertionError: 160.0", 160.0),
            ("test_keep", "pass"),
        ]
        + [("setUpClass", "skip", "no CUDA device")],
    )
    run = replace(run, output="nothing here is read\n")
    m = _build([run], modes=("change",))
    grow, keep, skipped = (c.modes["change"] for c in m.cases)
    assert [c.test for c in m.cases] == [
        f"{CLS}.test_grow",
        f"{CLS}.test_keep",
        f"{CLS}.setUpClass",
    ]
    assert (grow.outcome, grow.peak_mib, grow.duration_s) == ("fail", 160.0, 0.5)
    assert "AssertionError: 160.0" in grow.detail
    assert (keep.outcome, keep.detail, skipped.detail) == ("pass", "", "no CUDA device")
    assert m.files[0].modes["change"].tests == 3


def test_a_channel_line_that_is_not_a_result_is_an_error_that_names_it():
    text = channel_line("test_a", "pass") + '\n{"test": "T.b", "outcome": "great"}\n[[[\n'
    results, errors = read_channel(text)
    assert [r.test for r in results] == [f"{CLS}.test_a"]
    assert "result line 2.outcome: 'great' is not one of" in errors[0]
    assert errors[1].startswith("result line 3: ")
    extra = json.dumps({"test": "T.x", "outcome": "pass", "evidence": [1]})
    assert "unknown field 'evidence'" in read_channel(extra)[1][0]


def test_a_bad_channel_line_fails_the_file_with_a_case_of_its_own():
    run = file_run("change", [("test_a", "pass")])
    run = replace(run, channel=run.channel + '{"test": "T.test_b", "outcome": "great"}\n')
    m = _build([run], modes=("change",))
    assert {c.test: c.modes["change"].outcome for c in m.cases} == {
        f"{CLS}.test_a": "pass",
        FILE_CASE: "error",
    }
    assert m.verdict == "failed"


def _side(result):
    if result == "absent":
        return None
    outcome = {"retry": "pass", "unseen": "pass"}.get(result, result)
    attempts = ("fail", "pass") if result == "retry" else ()
    return TestResult("T.t", outcome, attempts=attempts, unobserved=result == "unseen")


@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("base", judge.SIDE_RESULTS)
@pytest.mark.parametrize("change", judge.SIDE_RESULTS)
def test_the_truth_table_decides_every_combination_of_the_two_sides(change, base, listed):
    outcomes = {m: r for m, r in (("change", _side(change)), ("unmodified", _side(base))) if r}
    assert judge.side_result(outcomes.get("change")) == change
    kind = judge.kind_of(outcomes, listed)
    assert (kind == "broken") == (change in ("fail", "missing"))
    if kind == "regression":  # the one proof of a fix: fails unmodified, passes with it
        assert base == "fail" and change in ("pass", "absent")
    if kind in ("preservation", "no-baseline"):
        assert change in ("pass", "absent") and not (listed and base in ("pass", "skip", "missing"))


def test_kinds_are_the_truth_table_of_both_outcomes():
    m = model()
    assert [c.kind for c in m.cases] == ["regression", "preservation"]
    assert (m.verdict, m.reasons) == ("ok", ())
    peaks = {m: c.peak_mib for m, c in m.cases[0].modes.items()}
    assert peaks == {"unmodified": 160.0, "change": 96.0}


def test_a_listed_regression_that_passes_unmodified_makes_the_run_void_with_its_reason():
    m = model(workspace_runs(grow_unmodified="pass"))
    assert [c.kind for c in m.cases] == ["not-reproduced", "preservation"]
    assert m.verdict == "void"
    assert m.reasons == (
        f"the bug did not reproduce: 1 listed regressions pass on sglang 0.5.23 ({CLS}.{GROW}); "
        "is the change already in it?",
    )
    assert m.files[0].flags == (judge.FLAG_NOT_REPRODUCED,)


def test_a_file_is_flagged_not_reproduced_only_when_every_test_passes_unmodified():
    # One test fails unmodified (the bug shows), one passes (a preservation test): no flag.
    assert model(workspace_runs(grow_unmodified="fail")).files[0].flags == ()
    assert model(workspace_runs(grow_unmodified="pass")).files[0].flags == (
        judge.FLAG_NOT_REPRODUCED,
    )


def test_an_unmodified_side_that_runs_nothing_makes_the_run_void():
    runs = workspace_runs()
    skipped = file_run("unmodified", [(GROW, "skip", "no GPU"), (REUSE, "skip", "no GPU")])
    m = model([skipped, runs[1]], patterns=[])
    assert m.verdict == "void" and "gave no verdict" in m.reasons[0]


def test_a_file_that_fails_at_import_on_the_base_fails_each_of_its_tests_there():
    # An upstream PR that adds a module and its test: the base cannot even import the file.
    base = file_run("unmodified", [], returncode=1)
    base = replace(base, output="ModuleNotFoundError: No module named 'new_module'\n")
    head = file_run("change", [("test_a", "pass"), ("test_b", "pass")])
    m = _build([base, head])
    assert [(c.test, c.kind) for c in m.cases] == [
        (f"{CLS}.test_a", "regression"),
        (f"{CLS}.test_b", "regression"),
    ]
    assert "No module named 'new_module'" in m.cases[0].modes["unmodified"].detail
    assert m.verdict == "ok"


def test_a_crash_after_some_tests_is_a_case_of_its_own_and_fails_the_run():
    run = file_run("change", [("test_a", "pass")], returncode=-11)
    m = _build([file_run("unmodified", [("test_a", "pass")]), run])
    outcomes = {c.test: (c.kind, c.modes["change"].outcome) for c in m.cases}
    assert outcomes == {f"{CLS}.test_a": ("preservation", "pass"), FILE_CASE: ("broken", "error")}
    assert m.verdict == "failed" and "1 fail with sglang 0.5.23 + this change" in m.reasons[0]


def test_a_timeout_on_the_change_side_fails_the_run_and_flags_the_file():
    late = replace(file_run("change", [("test_a", "pass")]), timed_out=True, returncode=None)
    m = _build([file_run("unmodified", [("test_a", "fail", "x")]), late])
    assert "timed out (change)" in m.files[0].flags and m.verdict == "failed"


def _retried(run, test, attempts):
    """``run`` with ``test``'s channel line carrying ``attempts`` (a pass after a failure)."""
    lines = [json.loads(line) for line in run.channel.splitlines()]
    for line in lines:
        if line["test"].endswith(test):
            line.update(outcome="pass", attempts=attempts, detail="attempt 1 of 2 failed")
    failed = any(line["outcome"] in ("fail", "error") for line in lines)
    channel = "\n".join(json.dumps(line) for line in lines) + "\n"
    return replace(run, channel=channel, returncode=int(failed))


def test_a_listed_regression_that_passes_on_the_retry_is_masked_and_fails_the_run():
    base, head = workspace_runs()
    m = model([_retried(base, GROW, ["fail", "pass"]), head])
    assert [c.kind for c in m.cases] == ["masked-by-retry", "preservation"]
    assert m.cases[0].modes["unmodified"].attempts == ("fail", "pass")
    assert m.verdict == "failed"
    assert m.reasons == (
        f"1 masked by retry on sglang 0.5.23: upstream's CI would pass them on the unmodified "
        f"code, failing first and passing on the retry ({CLS}.{GROW})",
    )


def test_a_pass_on_the_retry_with_the_change_is_flaky_and_fails_the_run():
    base, head = workspace_runs()
    m = model([base, _retried(head, REUSE, ["error", "pass"])])
    assert [c.kind for c in m.cases] == ["regression", "flaky"]
    assert m.verdict == "failed" and m.reasons[0].startswith("1 flaky with sglang 0.5.23 + ")


def test_every_attempt_failing_is_still_a_plain_regression():
    base, head = workspace_runs()
    base = _retried(base, GROW, ["fail", "fail"])
    base = replace(base, channel=base.channel.replace('"outcome": "pass"', '"outcome": "error"', 1))
    m = model([base, head])
    assert [c.kind for c in m.cases] == ["regression", "preservation"] and m.verdict == "ok"


def _base_passes_on_the_retry():
    base, head = workspace_runs()
    return [_retried(base, GROW, ["fail", "pass"]), head]


@pytest.mark.parametrize(
    "runs, kinds, verdict",
    [
        (
            lambda: workspace_runs(grow_unmodified="pass"),
            ["not-reproduced", "preservation"],
            "void",
        ),
        # the attempts a results file records are judged again too
        (_base_passes_on_the_retry, ["masked-by-retry", "preservation"], "failed"),
    ],
    ids=["passes-unmodified", "passes-on-the-retry"],
)
def test_rejudging_ignores_the_kinds_and_verdict_a_results_file_claims(runs, kinds, verdict):
    honest = model(runs())
    forged = replace(
        honest,
        verdict="ok",
        reasons=(),
        cases=[replace(c, kind="regression") for c in honest.cases],
    )
    again = judge.rejudge(forged, [f"{FILE}::*.test_grow_*"])
    assert [c.kind for c in again.cases] == kinds
    assert again.verdict == verdict


def test_results_round_trip_through_json_and_are_frozen(tmp_path):
    fixes = (
        FixId("b" * 64, ("0001-a.patch", "0002-a-test.patch")),
        FixId("c" * 64, ("0003-b.patch",)),
    )
    m = replace(model(), series=SeriesId("a" * 64, "0.5.23", ("0001-a.patch",), fixes))
    save(m, str(tmp_path))
    again = load(str(tmp_path))
    assert again == m and again.to_json() == m.to_json()
    with pytest.raises(FrozenInstanceError):
        again.verdict = "ok"
    assert isinstance(replace(m, cases=list(m.cases)).cases, tuple)


def _mutated(tmp_path, mutate):
    data = model().to_json()
    mutate(data)
    (tmp_path / "results.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("cases"), "missing field 'cases'"),
        (lambda d: d.update(schema=99), "schema: 99"),
        (lambda d: d.update(verdict="great"), "verdict"),
        (
            lambda d: d["cases"][0]["modes"]["change"].update(outcome="great"),
            "modes.change.outcome",
        ),
        (lambda d: d["cases"][1].update(kind="meh"), r"cases\[1\].kind"),
        (lambda d: d["cases"][0]["modes"]["change"].update(peak_mib="96"), "peak_mib"),
        (lambda d: d["cases"][0]["modes"]["change"].update(peak_mib=-1), "peak_mib"),
        (lambda d: d["cases"][0]["modes"]["change"].update(peak_mib=1e12), "peak_mib"),
        (lambda d: d["cases"][0].update(file="../../etc/passwd.py"), "relative test-file path"),
        (lambda d: d["cases"][0].update(line=10**7), "line"),
        (lambda d: d["cases"][0].update(line=0), "line"),
        (lambda d: d["cases"][0]["modes"]["change"].update(attempts=["maybe"]), "attempts"),
        (lambda d: d["cases"][0]["modes"]["change"].update(attempts=["skip"]), "attempts"),
        (lambda d: d["cases"][0]["modes"]["change"].update(attempts=["fail"] * 21), "attempts"),
        (lambda d: d["cases"][0]["modes"].update({"x\n::error::forged": {}}), "not one of the run"),
        (
            lambda d: d["files"][0]["modes"].update(change="broken"),
            "files.0.modes.change|expected an object",
        ),
        (
            lambda d: d["files"][0]["modes"]["change"].update(returncode=10**400),
            "integer of 401 digits",
        ),
        (lambda d: d["files"][0].update(suite="a b"), "suite"),
        (lambda d: d["files"][0].update(suite="base-a-test-cpu\n"), "suite"),  # fullmatch
        (lambda d: d["cases"][0].update(file="test/x.py\n"), "relative test-file path"),
        (lambda d: d["files"][0]["modes"]["change"].update(log="logs/a\n"), "log"),
        (lambda d: d["sides"]["change"].update(label=7), "label"),
        (lambda d: d["sides"]["change"].update(commit="not hex"), "commit"),
        (lambda d: d.update(pictures={"k": "../x.png"}), "pictures"),
        (lambda d: d["cases"][0].update(sneaky=1), "unknown field 'sneaky'"),
        (lambda d: d.update(environment={"a": json.loads("[" * 20 + "]" * 20)}), "nested"),
        (
            lambda d: d.update(series={"id": "a" * 64, "release": "0.5.23", "fixes": [{}]}),
            r"series.fixes\[0\]: missing field 'id'",
        ),
        (
            lambda d: d.update(
                series={"id": "a" * 64, "release": "0.5.23", "fixes": [{"id": "x", "patches": []}]}
            ),
            r"series.fixes\[0\].id",
        ),
        (
            lambda d: d.update(series={"id": "a" * 64, "release": "0.5.23", "fixes": [{}] * 101}),
            "101 items; at most 100",
        ),
    ],
)
def test_malformed_results_are_refused_naming_the_field(tmp_path, mutate, message):
    with pytest.raises(EvidenceError, match=message):
        load(str(_mutated(tmp_path, mutate)))


def test_results_that_are_not_a_plain_small_utf8_file_are_refused(tmp_path):
    (tmp_path / "results.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(EvidenceError, match="not readable"):
        load(str(tmp_path))
    (tmp_path / "results.json").unlink()
    (tmp_path / "results.json").symlink_to("/etc/hostname")
    with pytest.raises(EvidenceError, match="not a plain file"):
        load(str(tmp_path))
    (tmp_path / "results.json").unlink()
    (tmp_path / "results.json").write_text("[" * 100000)
    with pytest.raises(EvidenceError, match="not readable|not JSON"):
        load(str(tmp_path))


def test_the_loaded_model_is_exactly_what_was_judged():
    m = model()
    assert Results.from_json(json.loads(json.dumps(m.to_json()))) == m


def test_every_command_in_the_committed_evidence_names_a_module_of_this_repository():

    commands = {
        module
        for path in (REPO / "docs").rglob("*.md")
        for module in re.findall(r"python -m ([A-Za-z_][\w.]*)", path.read_text())
    }
    assert commands, "no command found: the pattern is wrong"
    where = {m: REPO / m.replace(".", "/") for m in commands}
    stale = [
        m for m, p in sorted(where.items()) if not (p.is_dir() or p.with_suffix(".py").exists())
    ]
    assert stale == []  # e.g. tools.series, renamed to series


def _with(run, test, **fields):
    lines = []
    for text in run.channel.splitlines():
        line = json.loads(text)
        if line["test"].endswith(test):
            line.update(fields)
        lines.append(json.dumps(line))
    return replace(run, channel="\n".join(lines) + "\n")


def test_a_pass_whose_attempts_went_unseen_is_unproven_on_either_side_never_green():
    unmodified, change = ci_samples.workspace_runs()
    for runs, side in (
        ([unmodified, _with(change, ci_samples.REUSE, unobserved=True)], "change"),
        ([_with(unmodified, ci_samples.REUSE, unobserved=True), change], "unmodified"),
    ):
        m = ci_samples.model(runs)
        (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
        assert reuse.kind == "unproven" and reuse.modes[side].outcome == Outcome.PASS, side
        assert m.verdict == "failed", (side, m.verdict)
        assert any(r.startswith("1 not proven") for r in m.reasons), m.reasons
    # An expected failure's attempts end in the failure: a pass, not a retried one.
    expected = _with(change, ci_samples.REUSE, attempts=["fail"])
    m = ci_samples.model([unmodified, expected])
    (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
    assert reuse.kind == "preservation", reuse.kind


def _without_grow_on_base():
    unmodified, change = ci_samples.workspace_runs()
    lines = [line for line in unmodified.channel.splitlines() if ci_samples.GROW not in line]
    return [replace(unmodified, channel="\n".join(lines) + "\n", returncode=0), change]


@pytest.mark.parametrize("base", ["skip", "missing"])
def test_a_listed_regression_that_skips_or_is_missing_on_base_is_not_green(base):
    runs = ci_samples.workspace_runs("skip") if base == "skip" else _without_grow_on_base()
    m = ci_samples.model(runs)
    (grow,) = [c for c in m.cases if c.test.endswith(ci_samples.GROW)]
    assert grow.kind == "not-reproduced" and m.verdict == "void", (grow.kind, m.verdict)
    assert any("skip or give no result" in r for r in m.reasons), m.reasons


def test_a_file_that_reports_one_id_twice_is_broken_and_its_failure_is_not_overwritten():
    unmodified, change = ci_samples.workspace_runs()
    fail = ci_samples.channel_line(ci_samples.REUSE, "fail", ci_samples.TRACEBACK)
    again = ci_samples.channel_line(ci_samples.REUSE, "pass")
    change = replace(change, channel=change.channel + fail + "\n" + again + "\n", returncode=0)
    m = ci_samples.model([unmodified, change])
    (reuse,) = [c for c in m.cases if c.test.endswith(ci_samples.REUSE)]
    assert reuse.modes["change"].outcome == "fail" and reuse.kind == "broken", reuse
    assert m.verdict == "failed"
    (whole,) = [c for c in m.cases if c.test == "(whole file)"]
    assert "reported more than once: a broken file" in whole.modes["change"].detail
