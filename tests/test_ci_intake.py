"""The results artifact is a stranger's upload: refused as exit 2, never green."""

import json
import os
import tempfile
import zipfile

import ci_samples
import pytest
from ci_samples import HEAD, PR, SLOT, model, posted, refused, report, results_folder, shard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci.evidence import shards
from ci.evidence.model import MODES, EvidenceError
from ci.reporter import github_io, pr_states, render
from ci.reporter import plan as reporting

fake = pytest.fixture(ci_samples.pr_fake, name="fake")


def _post(fake, monkeypatch, folder, *more):
    return report(fake, monkeypatch, "--results", str(folder), *PR, "--sha", HEAD, *more, "--post")


def _folder(tmp_path, edit=None, base=model, name="r"):
    """results.json of ``base()`` after ``edit(data)``; ``edit`` may return the text to write."""
    data = base().to_json()
    raw = edit(data) if edit else None
    folder = tmp_path / name
    folder.mkdir()
    raw = json.dumps(data, ensure_ascii=False) if raw is None else raw
    (folder / "results.json").write_text(raw, encoding="utf-8")
    return folder


def _set(path, value):
    def edit(data):
        *parents, last = path
        for key in parents:
            data = data[key]
        data[last] = value

    return edit


def _commands(text: str) -> list:
    """Lines the Actions runner takes as a command: ``::`` at a line's start, or ``##[``."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


COMMAND = "x\n::error file=setup.py,line=1::run curl | sh\r\n::warning::y ##[add-mask]secret"
REFUSED = {
    "schema-only": lambda d: '{"schema": 1}',
    "command-in-a-mode-key": _set(["cases", 0, "modes", COMMAND], {"outcome": "bogus"}),
    "command-in-an-outcome": _set(["cases", 0, "modes", "change", "outcome"], COMMAND),
    "command-in-a-path": _set(["cases", 0, "file"], COMMAND),
    "an-integer-past-any-float": _set(["cases", 0, "modes", "change", "duration_s"], 10**400),
}  # fmt: skip


@pytest.mark.parametrize("edit", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_artifact_is_exit_2_a_failure_slot_and_a_failed_check_run_saying_why(
    fake, tmp_path, monkeypatch, capsys, edit
):
    assert _post(fake, monkeypatch, _folder(tmp_path, edit), "--check-run") == 2
    refused(fake)
    (run,) = fake.check_runs.values()
    assert run["conclusion"] == "failure" and run["output"]["title"] == "Invalid artifact"
    out = capsys.readouterr()
    assert "error: invalid artifact: " in out.err and not _commands(out.out + out.err)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)  # fmt: skip


def _leaves(data, prefix=()):
    items = enumerate(data) if isinstance(data, list) else getattr(data, "items", tuple)()
    return [prefix] * bool(prefix) + [p for k, v in items for p in _leaves(v, (*prefix, k))]


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_leaves(model().to_json())), _JSON), min_size=1, max_size=3
    )
)
def test_any_value_anywhere_in_results_json_is_refused_or_reported_never_a_traceback(edits):
    data = model().to_json()
    for path, value in edits:
        try:
            _set(path, value)(data)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced a parent
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "results.json"), "w") as handle:
            json.dump(data, handle)
        request = reporting.ReportRequest(results=(folder,), sha=HEAD, check_run=True)
        plan = reporting.plan(reporting.prepare(request))  # raises nothing: a model or a refusal
        assert plan.invalid or plan.comment


@pytest.mark.parametrize("post", [False, True], ids=["dry-run", "post"])
def test_no_log_text_or_name_from_a_valid_artifact_reaches_the_log_as_a_workflow_command(
    fake, tmp_path, monkeypatch, capsys, post
):
    def hostile(data):
        data["cases"][0]["test"] = "TestW.test_x ##[add-mask]y"
        data["cases"][0]["modes"]["unmodified"]["detail"] = (
            "boom\n::error title=P::x\n ##[stop-commands]z"
        )

    summary = tmp_path / "summary.md"
    args = ["--results", str(_folder(tmp_path, hostile)), "--summary", str(summary), "--check-run"]
    assert report(fake, monkeypatch, *args, "--sha", HEAD, *PR, *(["--post"] if post else [])) == 0
    out = capsys.readouterr()
    assert not _commands(out.out + out.err) and not _commands(summary.read_text())
    assert not [
        body for _, _, body in fake.bodies_sent if "##[" in json.dumps(body, ensure_ascii=False)
    ]


def _only_the_change_side(data):
    data["modes"] = ["change"]
    del data["sides"]["unmodified"], data["files"][0]["modes"]["unmodified"]
    for case in data["cases"]:
        case["modes"].pop("unmodified")


SHRINK = "test_shrink_by_dtype_96_mib_bf16_to_48_mib_fp8_peaks_at_96_mib"


@pytest.mark.parametrize(
    "edit, slot, said",
    [
        (None, ":white_check_mark:", "**3** fixed by this PR"),
        (_only_the_change_side, ":x:", "no unmodified side"),
        (lambda d: d.update(cases=[c for c in d["cases"] if SHRINK not in c["test"]]), ":x:",
         f"{SHRINK} is not among the cases".replace("_", "\\_")),
    ],
    ids=["as-posted", "only-the-change-side", "listed-regression-left-out"],
)  # fmt: skip
def test_an_artifact_is_judged_again_from_its_outcomes_and_the_regressions_it_must_hold(
    fake, tmp_path, monkeypatch, edit, slot, said
):
    assert _post(fake, monkeypatch, _folder(tmp_path, edit, base=posted)) == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(slot)
    (comment,) = fake.comments.values()
    assert said in comment["body"].replace("\u2060", "")
    assert {s["state"] for s in fake.statuses} == {"success" if slot != ":x:" else "failure"}


@pytest.mark.parametrize("given", ["green-shards", "green", "broken", "broken-file", "missing"])
def test_a_failed_test_job_is_reported_by_the_results_it_left_and_never_green(
    fake, tmp_path, monkeypatch, given
):
    # The change fails a test, so the test job fails on purpose: its results are the report.
    broken = [ci_samples.file_run(m, [(ci_samples.GROW, "fail")]) for m in MODES]
    folder = results_folder(tmp_path / "broken", model(broken))
    results = {
        "green-shards": [
            str(results_folder(tmp_path / i, shard(f"{i}/2", path=f"t/{i}.py"))) for i in "01"
        ],
        "green": [str(_folder(tmp_path))],
        "broken": [str(folder)],
        "broken-file": [str(folder / "results.json")],
        "missing": [str(tmp_path / "none")],
    }[given]
    args = ["--results", *results, "--test-result", "failure", *PR, "--sha", HEAD]
    assert report(fake, monkeypatch, *args, "--require-head", "--check-run", "--post") == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(":x:")
    assert all(s["state"] != "success" for s in fake.statuses)
    assert all(r["conclusion"] != "success" for r in fake.check_runs.values())
    if given.startswith("broken"):  # by the results, not "no results"
        assert [s["state"] for s in fake.statuses] == ["failure"]
        (ours,) = fake.comments.values()
        assert ours["body"].startswith(render.comment_marker(SLOT))


def _zip(path, members=20):
    limit = zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP_FILECOUNT_LIMIT = 1  # zip64 end records, as past 65,535 members
    try:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("results.json", json.dumps(posted().to_json()))
            for i in range(members - 1):
                archive.writestr(f"logs/f{i}.log", "")
    finally:
        zipfile.ZIP_FILECOUNT_LIMIT = limit


@pytest.mark.parametrize(
    "write, refusal",
    [
        (_zip, None),
        (lambda p: p.write_bytes(b"PK\x03\x04" + bytes(100)), "not a readable zip"),
        (lambda p: zipfile.ZipFile(p, "w").close(), "no results.json at its top"),
    ],
    ids=["zip64-with-logs", "no-end-record", "no-results-json"],
)
def test_only_results_json_is_read_out_of_the_artifacts_zip(tmp_path, write, refusal):
    write(tmp_path / "a.zip")
    if refusal is None:
        github_io.extract_results(str(tmp_path / "a.zip"), str(tmp_path))
        assert shards.load(str(tmp_path)) == posted()
    else:
        with pytest.raises(EvidenceError, match=refusal):
            github_io.extract_results(str(tmp_path / "a.zip"), str(tmp_path))


NEWER = "b" * 40
PENDING = pr_states.set_slot("Author's text.\n", SLOT, "Label", ":hourglass_flowing_sand:")


def _newer_report(server):
    server.bodies[7] = pr_states.set_slot(server.bodies[7], SLOT, "Label", ":x: newer")


@pytest.mark.parametrize(
    "before, also, slot",
    [
        ("Author's text.\n", None, ":white_check_mark:"),  # no slot before ours: none to put back
        (PENDING, None, ":hourglass_flowing_sand:"),  # the newer run's pending slot, put back
        (PENDING, _newer_report, ":x: newer"),  # a newer writer's slot is never put back over
    ],
)
def test_a_push_landing_during_the_report_stops_the_comment_not_the_commit_status(
    fake, tmp_path, monkeypatch, before, also, slot
):
    def push(server):
        server.heads[7] = NEWER
        if also:
            also(server)

    fake.bodies[7] = before
    fake.after("PATCH", r"/issues/7$", push)
    assert _post(fake, monkeypatch, _folder(tmp_path, base=posted), "--require-head") == 0
    assert pr_states.get_slot(fake.bodies[7], SLOT).startswith(slot)
    assert fake.comments == {}  # the evidence of HEAD is not posted on a PR now at NEWER
    assert fake.statuses and all(s["sha"] == HEAD for s in fake.statuses)


def _regressions(count: int, name=lambda i: f"TestW.test_case_{i:05d}"):
    data = model().to_json()
    for side in data["cases"][0]["modes"].values():
        side.pop("peak_mib")  # no pictures to draw: they are not the subject
    data["cases"] = [dict(data["cases"][0], test=name(i)) for i in range(count)]
    return data


def test_ten_thousand_regression_cases_cost_at_most_ten_check_run_requests(
    fake, tmp_path, monkeypatch
):
    folder = _folder(tmp_path, lambda d: json.dumps(_regressions(10_000)))
    assert _post(fake, monkeypatch, folder, "--check-run") == 0
    (run,) = fake.check_runs.values()
    assert len(run["annotations"]) == 500 and "first 500 of 10000" in run["output"]["title"]
    assert fake.count("POST", r"/check-runs$") + fake.count("PATCH", r"/check-runs/\d+$") <= 10


def test_a_step_summary_of_many_byte_names_stays_under_githubs_1_mib(fake, tmp_path, monkeypatch):
    data = _regressions(3000, name=lambda i: f"{i:05d}" + "\u754c" * 495)  # 3 bytes each
    summary = tmp_path / "step-summary.md"
    folder = _folder(tmp_path, lambda d: json.dumps(data, ensure_ascii=False))
    assert report(fake, monkeypatch, "--results", str(folder), "--summary", str(summary)) == 0
    text = summary.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 1024 * 1024 and "truncated" in text
