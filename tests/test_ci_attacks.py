"""A hostile fork PR against the bot's report path, through what it controls.

For the attacks that broke something (each test failed before its fix): the results
artifact (non-UTF-8, nesting deeper than the JSON parser's recursion, environment records of
the wrong shape, cases missing a mode, NaN/Infinity peaks, absurd def lines, thousands of suites
or annotations that would spend the API rate limit), text meant to act on GitHub (bidi
overrides, zero-width and C1 control characters, mentions and issue references that survive
entity decoding, a step summary of many-byte names over 1 MiB), PR bodies the author writes
(an unclosed slot-start marker, a fenced example of the block, an unclosed fence) and a push
racing the report. Requests go to the fake GitHub through the real github3.py client; a refused
artifact is exit 2 and a failure slot that says "invalid artifact", never a traceback and never a
slot left pending, and nothing it carries reaches the log as a workflow command.

And a hostile registered file against ``ci run`` itself (the test process is PR code): JSON
nested past the parser on the result channel or the environment record, or nested a few hundred
deep, which parses and then broke results.json; a process the file leaves behind holding its
pipes (in its session, or one that left it); megabytes on every pipe; lone surrogates
(``"\\ud800"`` in JSON) that no UTF-8 writer takes, on their way to report.md, JUnit, the step
summary and the comment; a regression case matplotlib cannot draw (a mathtext or surrogate name,
an infinite peak, which also made results.json one the report refuses); an sglang whose
``ci_register.py`` raises; and sglang's registry reader found as a namespace package, twice, or
after the real import.
"""

import html
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import unicodedata
import xml.etree.ElementTree as ET
from dataclasses import replace

import overlay_runs
import pytest
from ci_fake_github import FakeGitHub
from ci_samples import file_run, model, posted, refused, workspace_runs
from conftest import REPO, alive, clean_env, until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci.__main__ import main
from ci.evidence import junit, shards
from ci.evidence.model import EvidenceError, Results, save
from ci.reporter import artifact, checks, escape, pictures, pr_states, render
from ci.reporter import plan as reporting
from ci.reporter.publish import Publisher, RetryPolicy, connect
from ci.runner import environment, launch, modes

TOKEN = "ghs_actionsINSTALLATIONtoken"
HEAD = "c0ffee" + "0" * 34
SLOT = "dsv4-workspace"
MODES = ["unmodified", "change"]


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


# --- the results artifact: bad input is exit 2 and a failure slot saying so ------------------


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


# --- text that acts on GitHub -----------------------------------------------------------------

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


def test_every_control_and_format_character_of_this_unicode_database_is_shown_escaped():
    hostile = "".join(
        chr(i)
        for i in range(0x110000)
        if unicodedata.category(chr(i)) in ("Cc", "Cf") and chr(i) not in "\t\n\r"
    )
    shown = html.unescape(render.escape_inline("a" + hostile + "b"))
    block = render.escape_block("a" + hostile + "b")
    for text in (shown, block):
        assert text.isascii() and not set(hostile) & set(text)
    for ch in "\u202e\u200b\x85\U000e0041":
        assert ascii(ch)[1:-1] in shown and ascii(ch)[1:-1] in block


LOOK_ALIKES = [
    "test_grow",
    "test_grow\u3164",  # Hangul filler
    "test_grow\u115f",  # Hangul choseong filler
    "test_grow\u034f",  # combining grapheme joiner
    "test_grow\ufe0f",  # variation selector
    "test_grow\u200b",  # zero-width space
    "test_grow\u2800",  # braille blank
    "test_grow\u00a0",  # no-break space
    "test_gr\u043ew",  # a Cyrillic o
    "test_grow\\u3164",  # the escape itself, written out
    "test_gro\u0301w",  # a combining accent
    "test_gr\u00f3w",  # the same accent, precomposed
]


def test_two_different_case_names_never_render_alike():
    m = model()
    first = m.cases[0]
    cases = [replace(first, test=f"{name}") for name in LOOK_ALIKES]
    text = render.comment(replace(m, cases=cases), SLOT)
    rows = [html.unescape(line) for line in text.splitlines() if line.startswith("| test")]
    names = [row.split(" | ")[0] for row in rows]
    assert len(set(names)) == len(LOOK_ALIKES)
    assert all(name.isascii() for name in names)  # no letter of another script passes for ours
    create, _ = checks.bodies(replace(m, cases=cases), HEAD, "s", "2026-01-01T00:00:00Z")
    titles = [note["title"] for note in create["output"]["annotations"]]
    assert len(set(titles)) == len(LOOK_ALIKES) and all(t.isascii() for t in titles)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=8), st.text(max_size=8))
def test_escape_name_is_one_to_one(a, b):
    if a != b:
        assert render.escape_name(a) != render.escape_name(b)
        assert escape.name_text(a) != escape.name_text(b)


@pytest.mark.parametrize(
    "name", ["ping @maintainers", "fixes #1", "sgl-project/sglang#1", "see GH-12 and @a-b"]
)
def test_a_test_name_can_neither_mention_nor_reference_after_entities_are_decoded(name):
    # GitHub turns markdown into HTML first (entities like &#64; become '@') and finds
    # mentions and issue references in that text; the escape must hold after decoding.
    shown = html.unescape(render.escape_inline(name))
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", shown), shown
    assert not re.search(r"#\d", shown) and not re.search(r"GH-\d", shown), shown


# --- the PR body: the author's text never loses a byte ---------------------------------------


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


def test_a_block_end_marker_inside_a_code_block_does_not_end_the_block():
    start, end = pr_states.markers(SLOT)
    body = (
        "Text\n<!-- pr-states:start -->\n---\n### CI States\n\n"
        "Other bot: <!-- slot:other:start -->ok<!-- slot:other:end -->\n"
        "```\n<!-- pr-states:end -->\n```\n"
        f"Label: {start}old{end}\n<!-- pr-states:end -->\n"
    )
    new = pr_states.set_slot(body, SLOT, "Label", "new")
    assert new == body.replace(f"{start}old{end}", f"{start}new{end}")


def test_results_json_that_loads_is_the_one_the_test_job_wrote(tmp_path):
    # A guard for the attacks above: the sample model itself round-trips through intake.
    folder = tmp_path / "ok"
    folder.mkdir()
    save(posted(), str(folder))
    assert shards.load(str(folder)) == posted()


# --- the artifact's zip: read through zipfile, its results.json capped ----------------------


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
    artifact.extract_results(zipped, str(tmp_path))
    assert shards.load(str(tmp_path)) == posted()


def test_a_file_without_a_zip_end_record_is_refused(tmp_path):
    path = tmp_path / "a.zip"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(EvidenceError, match="not a readable zip"):
        artifact.extract_results(str(path), str(tmp_path))


# --- the head SHA: a push racing the report ---------------------------------------------------


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


# --- the API rate limit: one artifact must not spend it ---------------------------------------


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


def test_a_body_ending_in_an_unclosed_fence_gets_one_block_however_many_runs():
    body = "Text\n```\ncode without its closing fence\n"
    for text in ("a", "b", "c"):
        body = pr_states.set_slot(body, SLOT, "Label", text)
    assert body.count(pr_states.BLOCK_START) == 1 and pr_states.get_slot(body, SLOT) == "c"
    assert body.startswith("Text\n```\ncode without its closing fence\n")


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


# --- the test process: what a file does to `ci run` itself ------------------------------------
#
# A registered file and all it imports are PR code. Each test below runs a tiny stand-in file
# through the real runner (ci/file_process.py, the two pipes, the process group), or feeds
# what such a file wrote to the stages after it.

FIND_FDS = """
import os, sys
with open("/proc/self/cmdline", "rb") as own:
    cmdline = own.read().split(bytes(1))
RECORD = int(cmdline[cmdline.index(b"--environment-fd") + 1])
CHANNEL = int(cmdline[cmdline.index(b"--results-fd") + 1])
"""


def _run_file(tmp_path, source, **env):
    """The stand-in file through the real runner, as ``ci run`` starts a registered file."""
    (tmp_path / "test_hostile.py").write_text(FIND_FDS + source)
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=clean_env(**env))
    return launch.run_file("test_hostile.py", "change", env, str(tmp_path), timeout_s=60)


def test_json_nested_past_the_parser_on_either_pipe_is_an_error_not_a_crash(tmp_path):
    deep = "[" * 5000  # a few KB: far under every size cap
    # Parses (the parser allows ~1000 levels), then breaks asdict and json.dump in ci run.
    parses = '{"test": "T.test_x", "outcome": "pass", "detail": %s}'
    channel = f"{deep}\n{parses % ('[' * 600 + ']' * 600)}\n"
    run = replace(file_run("change", []), channel=channel, environment=deep)
    records = environment.records_by_mode([run], ["change"])
    assert "error" in records["change"]
    m = model([run], patterns=[], environment={"modes": records})
    (case,) = m.cases
    assert "result line 1" in case.modes["change"].detail
    assert "result line 2: nested deeper than 16" in case.modes["change"].detail
    save(m, str(tmp_path))


LINGERS = """
pid = os.fork()
if pid == 0:  # holds stdout, the result channel and the record open, then sleeps
    if os.environ.get("OWN_SESSION"):
        os.setsid()
    import time
    time.sleep(120)
    os._exit(0)
print("grandchild", pid, flush=True)
"""


def test_a_process_the_file_leaves_behind_dies_with_it_and_holds_nothing_up(tmp_path, monkeypatch):
    # The grandchild sleeps 120 s holding every pipe. Were it not killed with the file's
    # process group, reading would stop only at DRAIN_S and the log would say so.
    monkeypatch.setattr(launch, "DRAIN_S", 90.0)
    run = _run_file(tmp_path, LINGERS)
    pid = int(re.search(r"grandchild (\d+)", run.output).group(1))
    try:
        assert (run.returncode, run.timed_out) == (0, False)
        assert "still held" not in run.output  # the pipes closed with the group
        assert until(lambda: not alive(pid), within_s=60.0)  # SIGKILL lands asynchronously
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_between_starting_a_file_and_registering_it_still_stops_it(tmp_path, monkeypatch):
    # Ctrl-C kills the groups registered so far; a file started just before that and
    # registered just after must not run on (here it would sleep until the run's timeout).
    stopping = threading.Event()
    monkeypatch.setattr(launch, "_STOPPING", stopping)
    started = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        proc = started(*args, **kwargs)
        stopping.set()  # ci run's Ctrl-C path ran here, before run_file registered proc
        return proc

    monkeypatch.setattr(launch.subprocess, "Popen", popen_then_ctrl_c)
    (tmp_path / "test_sleeps.py").write_text("import time\ntime.sleep(600)\n")
    env = modes.environment(modes.ModeSetup("change", overlay=True), base=clean_env())
    run = launch.run_file("test_sleeps.py", "change", env, str(tmp_path), timeout_s=30)
    assert (run.returncode, run.timed_out) == (-signal.SIGKILL, False), run.output


def test_a_process_that_leaves_the_files_session_costs_one_drain_wait_at_most(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(launch, "DRAIN_S", 1.0)
    run = _run_file(tmp_path, LINGERS, OWN_SESSION="1")
    pid = int(re.search(r"grandchild (\d+)", run.output).group(1))
    try:
        assert run.returncode == 0
        assert "still held" in run.output  # the log says why reading stopped
        assert alive(pid)  # ci run went on without waiting for it to end
    finally:
        os.kill(pid, signal.SIGKILL)  # out of reach of a process group: ours to end


FLOODS = """
block = b"x" * (1 << 20)
for _ in range(8):
    for fd in (RECORD, CHANNEL, 1):
        os.write(fd, block)
"""


def test_megabytes_on_every_pipe_keep_only_what_ci_run_can_use(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "OUTPUT_BYTES", 1 << 20)
    monkeypatch.setattr(launch, "CHANNEL_BYTES", 1 << 20)
    run = _run_file(tmp_path, FLOODS)
    assert run.returncode == 0  # read to the end: the writer was never blocked
    assert len(run.environment) <= launch.RECORD_BYTES < 8 << 20
    assert len(run.channel) <= 1 << 20
    assert len(run.output) < (1 << 20) + 200 and "dropped" in run.output[-200:]


def test_lone_surrogates_from_a_test_process_reach_neither_report_md_nor_the_report(
    fake, tmp_path, monkeypatch
):
    # json.loads turns "\\ud800" into a lone surrogate, which no UTF-8 writer accepts.
    runs = workspace_runs()
    line = json.dumps({"test": "TestW.test_\ud800x", "outcome": "pass"})
    change = replace(
        runs[1], channel=runs[1].channel + line + "\n", environment=r'{"torch": "2.0\udfff"}'
    )
    records = environment.records_by_mode([runs[0], change], MODES)
    env = {"gpus": [{"name": "H\ud800"}], "modes": records}
    m = model([runs[0], change], environment=env)
    out = tmp_path / "r"
    out.mkdir()
    save(m, str(out))
    junit.write(m, str(out))
    render.write_full_report(m, str(out))  # ci run's last step
    assert "\ud800" not in (out / "report.md").read_text()
    for mode in MODES:
        ET.parse(out / f"junit-{mode}.xml")  # well-formed XML, no &#55296;
    summary = tmp_path / "summary.md"
    assert _report(fake, monkeypatch, "--results", str(out), "--summary", str(summary)) == 0
    assert _post_results(fake, monkeypatch, out) == 0
    (comment,) = [c["body"] for c in fake.comments.values()]
    # Shown as their escapes (ASCII), never raw.
    assert "torch 2.0\\\\udfff" in comment and "test\\_\\\\ud800x" in comment


def test_an_sglang_whose_ci_register_raises_is_a_usage_error_not_a_traceback(tmp_path):
    reader = tmp_path / "site" / "sglang" / "test" / "ci"
    reader.mkdir(parents=True)
    (tmp_path / "site" / "sglang" / "__init__.py").write_text("")
    (reader / "ci_register.py").write_text("raise RuntimeError('the PR broke the reader')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend", "cpu"],
        cwd=REPO,
        env=clean_env(PYTHONPATH=str(tmp_path / "site")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ci_register.py: RuntimeError: the PR broke the reader" in proc.stderr


def _reader_program(code: str) -> str:
    return f"import sys\nfrom ci.runner import collect\n{code}\n"


# After sglang itself was imported the reader must still be sglang's: the last observation of
# the shared default process (``overlay_runs``), which imported sglang long before it.
READER_AFTER_THE_REAL_IMPORT = overlay_runs.observe(
    "default_process",
    "reader_after_the_real_import",
    f"""
    sys.path.insert(0, {str(REPO)!r})
    import sglang.test.ci.ci_register
    from ci.runner import collect
    return collect.registry_reader().collect_tests is not None
    """,
)
default_process = overlay_runs.fixture("default_process")


def test_the_registry_reader_is_sglangs_after_sglang_itself_was_imported(default_process):
    assert default_process.value(READER_AFTER_THE_REAL_IMPORT) is True


@pytest.mark.parametrize("layout", ["namespace", "twice"])
def test_the_registry_reader_is_sglangs_whichever_way_sglang_is_found(tmp_path, layout):
    code = {
        "namespace": "r = collect.registry_reader(); print(r.__file__.startswith(sys.argv[1]))",
        "twice": "print(collect.registry_reader() is collect.registry_reader())",
    }[layout]
    env = clean_env()
    if layout == "namespace":  # no __init__.py anywhere, and no installed sglang to win
        reader = tmp_path / "sglang" / "test" / "ci"
        reader.mkdir(parents=True)
        (installed,) = importlib.util.find_spec("sglang").submodule_search_locations
        real = os.path.join(installed, "test", "ci", "ci_register.py")
        (reader / "ci_register.py").write_text(open(real).read())
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    command = [sys.executable, *(["-S"] if layout == "namespace" else []), "-c"]
    proc = subprocess.run(
        [*command, _reader_program(code), str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "True", proc.stderr


@pytest.mark.parametrize(
    "name, peak",
    [("test_lone_\ud800", 96.0), ("test_$\\frac{$", 96.0), ("test_huge", 9.9e6)],
    ids=["surrogate", "mathtext", "huge-peak"],
)
def test_a_regression_case_matplotlib_cannot_draw_costs_its_picture_not_the_run(
    tmp_path, name, peak
):
    # Any name and any number on the channel: a case failing unmodified and passing with the
    # change is a regression, and each regression gets a picture.
    runs = [
        file_run("unmodified", [(name, "fail", "OOM", peak)]),
        file_run("change", [(name, "pass", "", peak)]),
    ]
    m = model(runs, patterns=[])
    assert [c.kind for c in m.cases] == ["regression"]
    m = replace(m, pictures=pictures.draw_all(m, str(tmp_path)))  # ci run's order from here
    save(m, str(tmp_path))
    junit.write(m, str(tmp_path))
    render.write_full_report(m, str(tmp_path))
    (case,) = shards.load(str(tmp_path)).cases  # the report takes it: no Infinity peak
    assert case.modes["change"].peak_mib == peak
