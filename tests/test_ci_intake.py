"""The results artifact is a stranger's upload: read through zipfile with its size capped,
every shape and bound checked, judged again from the raw outcomes. A refused artifact is exit 2
and a failure slot saying "invalid artifact", never a traceback, never a slot left pending,
never green, and nothing it carries reaches the log as a workflow command.
"""

import json
import os
import tempfile
import unicodedata
from dataclasses import replace

import ci_samples
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import model, posted, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci.__main__ import main
from ci.evidence import model as evidence_model
from ci.evidence import shards
from ci.evidence import shards as evidence_shards
from ci.evidence.model import EvidenceError, Results, save
from ci.reporter import checks, github_io, pr_states, render
from ci.reporter import plan as reporting
from ci.reporter.publish import Publisher, RetryPolicy, connect

TOKEN = "ghs_actionsINSTALLATIONtoken"


HEAD = "c0ffee" + "0" * 34


SLOT = "dsv4-workspace"


REPORT = ["--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD, "--require-head", "--post"]


@pytest.fixture
def fake():
    server = FakeGitHub(token=TOKEN, bot="github-actions[bot]").start()
    server.add_pr(7, "Author's text.\n", head_sha=HEAD)
    yield server
    server.stop()


def _report(fake, monkeypatch, *args):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("ci.reporter.publish.time.sleep", lambda _: None)
    return main(["report", "--api-url", fake.url, *args])


def _post_results(fake, monkeypatch, folder):
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    return _report(fake, monkeypatch, *args, "--post")


def _results_json(tmp_path, raw: bytes):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "results.json").write_bytes(raw)
    return folder


def _results_dir(tmp_path, m=None, name="ci-results"):
    folder = tmp_path / name
    folder.mkdir()
    save(m or posted(), str(folder))
    return folder


def _nothing_green(server):
    slot = pr_states.get_slot(server.bodies[7], SLOT)
    assert not slot.startswith(":white_check_mark:"), slot
    assert all(s["state"] != "success" for s in server.statuses), server.statuses
    assert all(r["conclusion"] != "success" for r in server.check_runs.values())
    return slot


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe{}",  # not UTF-8
        b"[" * 200_000 + b"]" * 200_000,  # deeper than json's recursion limit, 400 KB
    ],
    ids=["non-utf8", "deep-nesting"],
)
def test_unparseable_results_are_a_usage_error_not_a_crash(fake, tmp_path, monkeypatch, raw):
    assert _post_results(fake, monkeypatch, _results_json(tmp_path, raw)) == 2
    refused(fake)


def _raw_results(tmp_path, edit, name="r", base=model):
    """results.json of the sample model (``base()``) after ``edit(data)``, written as JSON text;
    ``edit`` may return replacement text for a raw number JSON cannot say (10**400)."""
    data = base().to_json()
    text = edit(data)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return folder


def _set(path, value):
    def edit(data):
        *parents, last = path
        target = data
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


MALFORMED = {
    "file-mode-as-string": _set(["files", 0, "modes", "change"], "crashed"),
    "file-mode-as-list": _set(["files", 0, "modes", "change"], [1, 2]),
    "timed-out-as-text": _set(["files", 0, "modes", "change", "timed_out"], "yes"),
    "returncode-as-bool": _set(["files", 0, "modes", "change", "returncode"], True),
    "unknown-file-mode": _set(["files", 0, "modes", "patched"], {}),
    "unknown-case-mode": _set(["cases", 0, "modes", "patched"], {"outcome": "pass"}),
    "case-modes-as-list": _set(["cases", 0, "modes"], ["change"]),
    "run-mode-unknown": _set(["modes"], ["unmodified", "change", "other"]),
    "duration-10e400": lambda d: json.dumps(d).replace(
        '"duration_s": 0.5', '"duration_s": 1' + "0" * 400, 1
    ),
    "line-10e400": lambda d: json.dumps(d).replace('"line": null', '"line": 1' + "0" * 400, 1),
    "peak-5000-digits": lambda d: json.dumps(d).replace(
        '"peak_mib": 160.0', '"peak_mib": 1' + "0" * 5000, 1
    ),
}


@pytest.mark.parametrize("edit", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_results_artifact_is_exit_2_and_a_failure_slot_never_a_traceback(
    fake, tmp_path, monkeypatch, capsys, edit
):
    folder = _raw_results(tmp_path, edit)
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)
    assert "error: invalid artifact: " in capsys.readouterr().err


def test_a_malformed_artifact_with_check_run_gets_a_failed_check_run_saying_why(
    fake, tmp_path, monkeypatch
):
    folder = _raw_results(tmp_path, MALFORMED["file-mode-as-list"])
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--check-run", "--post") == 2
    (run,) = fake.check_runs.values()
    assert run["conclusion"] == "failure" and run["output"]["title"] == "Invalid artifact"
    assert "files\\[0\\].modes.change" in run["output"]["summary"]


def _leaf_paths(data, prefix=()):
    found = [prefix] if prefix else []
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        found += _leaf_paths(value, (*prefix, key))
    return found


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


_PATHS = _leaf_paths(model().to_json())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.sampled_from(_PATHS), _JSON), min_size=1, max_size=3))
def test_any_value_anywhere_in_results_json_is_refused_or_reported_never_a_traceback(edits):
    data = model().to_json()
    for path, value in edits:
        target = data
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced a parent
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "results.json"), "w") as handle:
            json.dump(data, handle)
        request = reporting.ReportRequest(results=folder, sha=HEAD, check_run=True)
        plan = reporting.plan(reporting.prepare(request))  # raises nothing: a model or a refusal
        assert plan.invalid or plan.comment


def test_artifact_with_a_path_outside_the_repo_or_huge_counts_is_rejected(tmp_path):
    m = model()
    m = replace(m, cases=[replace(m.cases[0], file="../../etc/passwd.py"), *m.cases[1:]])
    folder = _results_dir(tmp_path, m)
    with pytest.raises(EvidenceError, match="relative test-file path"):
        shards.load(str(folder))
    m = replace(model(), backend="cuda\n<script>")
    with pytest.raises(EvidenceError, match="backend"):
        shards.load(str(_results_dir(tmp_path, m, "b")))


def test_artifact_results_json_over_the_size_cap_or_a_symlink_is_rejected(tmp_path, monkeypatch):
    folder = _results_dir(tmp_path)
    monkeypatch.setattr(evidence_model, "MAX_RESULTS_BYTES", 100)
    with pytest.raises(EvidenceError, match="larger than 100 bytes"):
        shards.load(str(folder))
    other = tmp_path / "link"
    other.mkdir()
    os.symlink(folder / "results.json", other / "results.json")
    monkeypatch.setattr(evidence_model, "MAX_RESULTS_BYTES", 10**6)
    with pytest.raises(EvidenceError, match="not a plain file"):
        shards.load(str(other))


def test_bad_results_from_the_artifact_are_exit_2_and_a_failure_slot_saying_so(
    fake, tmp_path, monkeypatch
):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "results.json").write_text('{"schema": 1}')
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--post"]
    assert _report(fake, monkeypatch, *args) == 2
    refused(fake)


WORKFLOW_COMMAND = (
    "x\n::error file=setup.py,line=1,title=Maintainer note::run curl | sh\r\n::warning::y"
    " ##[error]z ##[add-mask]secret ##[stop-commands]t0k3n"
)


def _commands(text: str) -> list:
    """The lines of ``text`` the Actions runner would take as a command: ``::`` at a line's
    start, after blanks (``##[`` anywhere)."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


@pytest.mark.parametrize(
    "edit",
    [
        _set(["cases", 0, "modes", WORKFLOW_COMMAND], {"outcome": "bogus"}),
        _set(["cases", 0, "modes", "change", "outcome"], WORKFLOW_COMMAND),
        _set(["files", 0, "modes", WORKFLOW_COMMAND], {}),
        _set(["files", 0, "modes", "change", "tests"], WORKFLOW_COMMAND),
        _set(["modes"], [WORKFLOW_COMMAND]),
        _set(["backend"], WORKFLOW_COMMAND),
        _set(["files", 0, "suite"], WORKFLOW_COMMAND),
        _set(["cases", 0, "file"], WORKFLOW_COMMAND),
    ],
    ids=["case-mode-key", "outcome", "file-mode-key", "tests", "modes", "backend", "suite", "path"],
)
def test_no_artifact_value_reaches_the_log_as_a_workflow_command(
    fake, tmp_path, monkeypatch, capsys, edit
):
    # The runner parses stdout and stderr alike for lines that start with "::".
    folder = _raw_results(tmp_path, edit)
    assert _post_results(fake, monkeypatch, folder) == 2
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert any("invalid artifact" in line for line in lines)
    assert not _commands(out.out + out.err)


@pytest.mark.parametrize("post", [False, True], ids=["dry-run", "post"])
def test_no_log_text_or_name_from_a_valid_artifact_reaches_the_log_as_a_workflow_command(
    fake, tmp_path, monkeypatch, capsys, post
):
    # A test's own log and name: the dry run prints the whole comment, excerpts included.
    data = model().to_json()
    grow = data["cases"][0]
    grow["test"] = "TestW.test_x ##[add-mask]y"
    grow["modes"]["unmodified"]["detail"] = "boom\n::error title=Pwned::x\n  ##[stop-commands]z"
    folder = _results_json(tmp_path, json.dumps(data).encode())
    summary = tmp_path / "summary.md"
    args = ["--results", str(folder), "--summary", str(summary), "--check-run", "--sha", HEAD]
    args += ["--repo", "sgl/sglang", "--pr", "7"] + (["--post"] if post else [])
    assert _report(fake, monkeypatch, *args) == 0
    out = capsys.readouterr()
    assert not _commands(out.out + out.err) and not _commands(summary.read_text())
    for method, _, body in fake.bodies_sent:
        assert "##[" not in json.dumps(body, ensure_ascii=False), method


def test_the_kinds_and_flags_an_artifact_claims_are_judged_again_from_its_outcomes(
    fake, tmp_path, monkeypatch
):
    def forge(data):
        keep, grow = data["cases"][1], data["cases"][0]
        grow["modes"]["unmodified"] = dict(grow["modes"]["change"])  # passes unmodified too
        keep["modes"]["change"]["outcome"] = "fail"  # fails with the change
        grow["kind"], keep["kind"] = "regression", "preservation"
        data["files"][0]["flags"] = []

    folder = _raw_results(tmp_path, forge)
    assert _post_results(fake, monkeypatch, folder) == 0
    (comment,) = [c["body"] for c in fake.comments.values()]
    assert ":x:" in comment.splitlines()[1]
    assert "| broken by this PR |" in comment and "| fixed by this PR |" not in comment
    assert "does not reproduce the bug" in comment
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":x:")
    assert {s["state"] for s in fake.statuses} == {"failure"}


def _only_the_change_side(data):
    data["modes"] = ["change"]
    del data["sides"]["unmodified"]
    del data["files"][0]["modes"]["unmodified"]
    for case in data["cases"]:
        case["modes"].pop("unmodified")


def _drop_case(name):
    def edit(data):
        data["cases"] = [c for c in data["cases"] if not c["test"].endswith(name)]

    return edit


MISMATCHED = {
    "only-the-change-side": (_only_the_change_side, "no unmodified side"),
    "listed-regression-left-out": (
        _drop_case("test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib"),
        "test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib is not among the cases",
    ),
}


@pytest.mark.parametrize("edit, reason", MISMATCHED.values(), ids=MISMATCHED.keys())
def test_a_record_the_judge_would_not_write_is_a_failure_slot_with_the_reason(
    fake, tmp_path, monkeypatch, capsys, edit, reason
):
    folder = _raw_results(tmp_path, edit, base=posted)
    assert _report(fake, monkeypatch, "--results", str(folder), "--json") == 0  # the dry run
    assert not _commands(capsys.readouterr().out)  # a listed pattern has "::" in it
    assert _post_results(fake, monkeypatch, folder) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":x:")
    (comment,) = [c["body"] for c in fake.comments.values()]
    assert reason.replace("_", "\\_") in comment.replace("\u2060", "")
    assert {s["state"] for s in fake.statuses} == {"failure"}


def test_the_unmodified_record_as_posted_is_green(fake, tmp_path, monkeypatch):
    # The guard for the mismatches above: the same artifact, untouched, is a success.
    assert (
        _post_results(fake, monkeypatch, _raw_results(tmp_path, lambda d: None, base=posted)) == 0
    )
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":white_check_mark:")


@pytest.mark.parametrize("listed", ["cases", "files"])
def test_a_case_or_file_listed_twice_is_refused(fake, tmp_path, monkeypatch, capsys, listed):
    folder = _raw_results(tmp_path, lambda data: data[listed].append(data[listed][0]))
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)
    assert "is listed twice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "environment",
    [
        {"gpus": "H200"},
        {"gpus": [7]},
        {"modes": ["change"]},
        {"modes": {"change": "torch"}},
        {"modes": {"change": {"overlay": [1]}}},
        {"git": {"commit": 5}},
        {"git": "HEAD"},
    ],
)
def test_an_environment_record_of_the_wrong_shape_cannot_crash_the_report(
    fake, tmp_path, monkeypatch, environment
):
    data = model().to_json()
    data["environment"] = environment
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 0
    (comment,) = [c["body"] for c in fake.comments.values()]
    assert "Environment:" in comment


def _green_shard(folder, shard):
    runs = [ci_samples.file_run(m, [(ci_samples.GROW, "pass")], path=f"test/{shard[0]}/test_x.py")
            for m in ("unmodified", "change")]  # fmt: skip
    results = replace(
        ci_samples.model(runs, selection={"shard": shard}), sides=ci_samples.sides("0.5.23")
    )
    folder.mkdir()
    save(results, str(folder))
    return str(folder)


@pytest.mark.parametrize("result", ["failure", "cancelled"])
def test_a_failed_test_job_whose_shards_or_folder_say_green_is_never_green(
    fake, tmp_path, monkeypatch, result
):
    shards = [_green_shard(tmp_path / "s0", "0/2"), _green_shard(tmp_path / "s1", "1/2")]
    assert _report(fake, monkeypatch, "--results", *shards, "--test-result", result, *REPORT) == 0
    _nothing_green(fake)
    one = _results_dir(tmp_path)
    assert _report(fake, monkeypatch, "--results", str(one), "--test-result", result, *REPORT) == 0
    _nothing_green(fake)


def test_a_ci_mode_shard_and_an_outside_ci_shard_do_not_merge():
    def shard(index, upstream_ci):
        runs = [ci_samples.file_run(m, [(ci_samples.GROW, "pass")], path=f"test/{index}/test_x.py")
                for m in ("unmodified", "change")]  # fmt: skip
        results = ci_samples.model(runs, selection={"shard": f"{index}/2"})
        environment = {**results.environment, "upstream_ci": upstream_ci}
        return replace(results, sides=ci_samples.sides("0.5.23"), environment=environment)

    named = [("a", shard(0, {"SGLANG_IS_IN_CI": "true"})), ("b", shard(1, None))]
    with pytest.raises(EvidenceError) as refused:
        evidence_shards.merge(named)
    said = str(refused.value)
    assert said.startswith("b: retry mode \"outside sglang's CI\" differs from a's"), said
    assert '{"SGLANG_IS_IN_CI": "true"}' in said and said.endswith("shards of different runs")


def test_results_json_that_loads_is_the_one_the_test_job_wrote(tmp_path):
    # A guard for the attacks above: the sample model itself round-trips through intake.
    folder = tmp_path / "ok"
    folder.mkdir()
    save(posted(), str(folder))
    assert shards.load(str(folder)) == posted()


def _zip_of(path, members: int, zip64=False):
    import zipfile

    limit = zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP_FILECOUNT_LIMIT = 1 if zip64 else limit  # zip64 end records, as past 65,535
    try:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("results.json", json.dumps(posted().to_json()))
            for i in range(members - 1):
                archive.writestr(f"logs/f{i}.log", "")
    finally:
        zipfile.ZIP_FILECOUNT_LIMIT = limit
    return str(path)


def test_a_zip_within_the_bounds_gives_its_results_json(tmp_path):
    zipped = _zip_of(tmp_path / "a.zip", 20, zip64=True)
    github_io.extract_results(zipped, str(tmp_path))
    assert shards.load(str(tmp_path)) == posted()


def test_a_file_without_a_zip_end_record_is_refused(tmp_path):
    path = tmp_path / "a.zip"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(EvidenceError, match="not a readable zip"):
        github_io.extract_results(str(path), str(tmp_path))


def _regressions(count: int, name=lambda i: f"TestW.test_case_{i:05d}"):
    data = model().to_json()
    case = data["cases"][0]
    data["cases"] = [dict(case, test=name(i)) for i in range(count)]
    return data


def test_thousands_of_suites_are_refused_before_a_status_is_sent(fake, tmp_path, monkeypatch):
    data = model().to_json()
    data["files"] = [dict(data["files"][0], path=f"t/f{i}.py", suite=f"s{i}") for i in range(51)]
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)


@pytest.mark.parametrize("suite", ["s\u202eevil", "a b", "x" * 101, "../s", ""])
def test_a_suite_name_that_is_not_one_is_refused(fake, tmp_path, monkeypatch, suite):
    data = model().to_json()
    data["files"][0]["suite"] = suite
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e308", "-5"])
@pytest.mark.parametrize("field", ["peak_mib", "duration_s"])
def test_a_peak_or_duration_that_is_not_a_measurement_is_refused(
    fake, tmp_path, monkeypatch, field, value
):
    data = model().to_json()
    data["cases"][0]["modes"]["change"][field] = 1.5  # a marker replaced below, raw
    raw = json.dumps(data).replace(f'"{field}": 1.5', f'"{field}": {value}', 1)
    folder = _results_json(tmp_path, raw.encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)


@pytest.mark.parametrize("kind, dropped", [("regression", "unmodified"), ("broken", "change")])
def test_a_case_missing_the_mode_its_kind_is_about_renders_as_missing(
    fake, tmp_path, monkeypatch, kind, dropped
):
    data = model().to_json()
    data["cases"][0]["kind"] = kind
    data["cases"][0]["modes"].pop(dropped)
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 0
    (comment,) = [c["body"] for c in fake.comments.values()]
    row = next(line for line in comment.splitlines() if line.startswith("| TestSparse"))
    assert "\u2014" in row  # the missing mode's cell


def test_a_def_line_past_any_real_file_is_refused(fake, tmp_path, monkeypatch):
    data = model().to_json()
    data["cases"][0]["line"] = 10**30
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    refused(fake)


BIDI_AND_INVISIBLE = "\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u200c\u200d\ufeff"


C1_AND_DEL = "\x7f\x85\x9b"


def test_bidi_overrides_zero_width_and_c1_controls_never_reach_the_comment(fake, tmp_path):
    m = model()
    name = "test_ok" + BIDI_AND_INVISIBLE + C1_AND_DEL + "\u2028gnp.exe"
    first = m.cases[0]
    excerpt = "log " + BIDI_AND_INVISIBLE + C1_AND_DEL + " end"
    first = replace(first, test=name)
    first.modes["unmodified"] = replace(first.modes["unmodified"], detail=excerpt)
    m = replace(m, cases=[first, *m.cases[1:]])
    text = render.comment(m, SLOT)
    hostile = set(BIDI_AND_INVISIBLE + C1_AND_DEL + "\u2028") - {"\u200b"}  # ZWSP: our defuser
    assert not hostile & set(text)
    row = next(line for line in text.splitlines() if "test\\_ok" in line)
    assert "\u200b" not in row  # the test name's own zero-width space is gone too
    assert not [c for c in text if unicodedata.category(c) == "Cc" and c not in "\n"]


def test_an_unclosed_slot_start_in_the_authors_block_never_costs_the_author_text(fake):
    start, _ = pr_states.markers(SLOT)
    authored = (
        "Intro\n<!-- pr-states:start -->\n---\n### CI States\n\n"
        f"mine: {start}the author's own words\n<!-- pr-states:end -->\n"
    )
    fake.bodies[7] = authored
    policy = RetryPolicy(sleep=lambda _: None, base_s=0.01)
    publisher = Publisher(connect(TOKEN, fake.url), "sgl", "sglang", 7, policy, log=lambda _: 0)
    publisher.settle_s = 0
    for text in (":hourglass_flowing_sand:", ":white_check_mark:", ":x:"):
        assert publisher.update_slot(SLOT, "Label", [text]) in ("updated", "unchanged")
        body = fake.bodies[7]
        assert body.startswith(authored[: authored.index("<!-- pr-states:end -->")]), body
        assert pr_states.get_slot(body, SLOT) == text


EXAMPLE_BLOCK = (
    "<!-- pr-states:start -->\n---\n### CI States\n\n"
    "Label: <!-- slot:dsv4-workspace:start -->EXAMPLE<!-- slot:dsv4-workspace:end -->\n"
    "<!-- pr-states:end -->\n"
)


@pytest.mark.parametrize("fence", ["```", "~~~~", "  ```markdown"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_the_authors_fenced_example_of_the_block_is_never_taken_for_ours(fake, fence, newline):
    close = fence.strip().rstrip("markdown")
    authored = f"How the bot reports:\n{fence}\n{EXAMPLE_BLOCK}{close}\nThanks.\n"
    authored = authored.replace("\n", newline)
    fake.bodies[7] = authored
    policy = RetryPolicy(sleep=lambda _: None, base_s=0.01)
    publisher = Publisher(connect(TOKEN, fake.url), "sgl", "sglang", 7, policy, log=lambda _: 0)
    publisher.settle_s = 0
    for text in (":hourglass_flowing_sand:", ":x:"):
        assert publisher.update_slot(SLOT, "Label", [text]) == "updated"
        body = fake.bodies[7]
        assert body.startswith(authored), body  # the example keeps EXAMPLE; ours is appended
        assert pr_states.get_slot(body, SLOT) == text


def _report_while_a_push_lands(fake, tmp_path, monkeypatch, newer):
    """``ci report --require-head --post`` for HEAD while the PR's head moves to ``newer`` as
    soon as the PR body is written; the command's exit code."""
    fake.after("PATCH", r"/issues/7$", lambda server: server.heads.__setitem__(7, newer))
    folder = tmp_path / "r"
    folder.mkdir()
    save(model(), str(folder))
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    return _report(fake, monkeypatch, *args, "--require-head", "--post")


def test_a_push_landing_after_the_slot_write_stops_the_comment_but_not_the_commit_status(
    fake, tmp_path, monkeypatch
):
    newer = "b" * 40
    assert _report_while_a_push_lands(fake, tmp_path, monkeypatch, newer) == 0
    assert fake.comments == {}  # the evidence of HEAD is not posted on a PR now at `newer`
    assert fake.statuses and all(s["sha"] == HEAD for s in fake.statuses)


def test_a_push_landing_during_the_slot_write_gets_the_slot_put_back(fake, tmp_path, monkeypatch):
    newer = "b" * 40
    pending = pr_states.set_slot("Author's text.\n", SLOT, "Label", ":hourglass_flowing_sand:")
    fake.bodies[7] = pending  # the newer run's pending job wrote this before our report
    assert _report_while_a_push_lands(fake, tmp_path, monkeypatch, newer) == 0
    assert fake.bodies[7] == pending  # not the old commit's :white_check_mark:
    assert fake.comments == {}


def test_a_newer_writers_slot_is_never_put_back_over(fake, tmp_path, monkeypatch):
    newer = "b" * 40
    fake.bodies[7] = pr_states.set_slot(
        "Author's text.\n", SLOT, "Label", ":hourglass_flowing_sand:"
    )

    def push_and_newer_report(server):
        server.heads[7] = newer
        server.bodies[7] = pr_states.set_slot(server.bodies[7], SLOT, "Label", ":x: newer")

    fake.after("PATCH", r"/issues/7$", push_and_newer_report)
    monkeypatch.setattr("ci.reporter.publish.Publisher.settle_s", 0)
    folder = tmp_path / "r"
    folder.mkdir()
    save(model(), str(folder))
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--require-head", "--post") == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT) == ":x: newer"


def test_ten_thousand_regression_cases_cost_at_most_ten_check_run_requests(
    fake, tmp_path, monkeypatch
):
    folder = _results_json(tmp_path, json.dumps(_regressions(10_000)).encode())
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--check-run", "--post") == 0
    (run,) = fake.check_runs.values()
    assert len(run["annotations"]) == 500
    assert fake.count("POST", r"/check-runs$") + fake.count("PATCH", r"/check-runs/\d+$") <= 10
    assert "first 500 of 10000" in run["output"]["title"]


def test_an_annotation_title_carries_no_bidi_or_invisible_characters():
    data = _regressions(1, name=lambda i: "test_\u202egnp.exe\u200b\x1b[31m")
    m = Results.from_json(json.loads(json.dumps(data)))
    create, _ = checks.bodies(m, HEAD, "summary", "2026-01-01T00:00:00Z")
    (note,) = create["output"]["annotations"]
    assert note["title"] == "test_\\u202egnp.exe\\u200b\\x1b[31m"  # shown, not hidden


def test_a_step_summary_of_many_byte_names_stays_under_githubs_1_mib(fake, tmp_path, monkeypatch):
    data = _regressions(3000, name=lambda i: f"{i:05d}" + "\u754c" * 495)  # 3 bytes each
    folder = _results_json(tmp_path, json.dumps(data, ensure_ascii=False).encode())
    summary = tmp_path / "step-summary.md"
    args = ["--results", str(folder), "--summary", str(summary)]
    assert _report(fake, monkeypatch, *args) == 0
    text = summary.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 1024 * 1024
    assert "truncated" in text
