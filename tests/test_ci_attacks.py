"""A hostile fork PR against the bot's report path, through what it controls.

For the attacks that broke something (each test failed before its fix): the results and gate
artifacts (non-UTF-8, nesting deeper than the JSON parser's recursion, environment records of
the wrong shape, cases missing a mode, NaN/Infinity peaks, absurd def lines, thousands of suites
or annotations that would spend the API rate limit), text meant to act on GitHub (bidi
overrides, zero-width and C1 control characters, mentions and issue references that survive
entity decoding, a step summary of many-byte names over 1 MiB), PR bodies the author writes
(an unclosed slot-start marker, a fenced example of the block, an unclosed fence) and a push
racing the report. Requests go to the fake GitHub through the real github3.py client; a rejected
artifact must send no request at all.
"""

import html
import json
import re
import unicodedata
from dataclasses import replace

import pytest
from ci_fake_github import FakeGitHub
from ci_samples import model

from ci import pr_body, render, results
from ci.__main__ import main
from ci.publish import Publisher, connect
from ci.retry import RetryPolicy

TOKEN = "ghs_actionsINSTALLATIONtoken"
HEAD = "c0ffee" + "0" * 34
SLOT = "dsv4-workspace"


@pytest.fixture
def fake():
    server = FakeGitHub(token=TOKEN, bot="github-actions[bot]").start()
    server.add_pr(7, "Author's text.\n", head_sha=HEAD)
    yield server
    server.stop()


def _report(fake, monkeypatch, *args):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setattr("ci.retry.time.sleep", lambda _: None)
    return main(["report", "--api-url", fake.url, *args])


def _post_results(fake, monkeypatch, folder):
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    return _report(fake, monkeypatch, *args, "--post")


def _results_json(tmp_path, raw: bytes):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "results.json").write_bytes(raw)
    return folder


# --- the results artifact: bad input is exit 2 and sends nothing ----------------------------


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
    assert fake.requests == []


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


def test_a_gate_record_nested_deeper_than_the_parser_allows_is_a_usage_error(
    fake, tmp_path, monkeypatch
):
    event = tmp_path / "event.json"
    run = {"id": 1, "event": "pull_request", "head_sha": HEAD, "conclusion": "success"}
    event.write_text(json.dumps({"workflow_run": run, "repository": {"full_name": "sgl/sglang"}}))
    gate = tmp_path / "gate.json"
    gate.write_text("[" * 2000 + "]" * 2000)  # under the 4 KiB cap
    args = ["--workflow-run", str(event), "--gate", str(gate), "--results", str(tmp_path)]
    assert _report(fake, monkeypatch, *args, "--post") == 2
    assert fake.requests == []


# --- text that acts on GitHub -----------------------------------------------------------------

BIDI_AND_INVISIBLE = "\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u200c\u200d\ufeff"
C1_AND_DEL = "\x7f\x85\x9b"


def test_bidi_overrides_zero_width_and_c1_controls_never_reach_the_comment(fake, tmp_path):
    m = model()
    name = "test_ok" + BIDI_AND_INVISIBLE + C1_AND_DEL + "\u2028gnp.exe"
    first = m.cases[0]
    excerpt = "log " + BIDI_AND_INVISIBLE + C1_AND_DEL + " end"
    first = replace(first, case_id=name)
    first.modes["unmodified"] = replace(first.modes["unmodified"], excerpt=excerpt)
    m = replace(m, cases=[first, *m.cases[1:]])
    text = render.comment(m, SLOT)
    hostile = set(BIDI_AND_INVISIBLE + C1_AND_DEL + "\u2028") - {"\u200b"}  # ZWSP: our defuser
    assert not hostile & set(text)
    row = next(line for line in text.splitlines() if "test\\_ok" in line)
    assert "\u200b" not in row  # the test name's own zero-width space is gone too
    assert not [c for c in text if unicodedata.category(c) == "Cc" and c not in "\n"]


def test_every_control_and_format_character_of_this_unicode_database_is_dropped():
    hostile = "".join(
        chr(i)
        for i in range(0x110000)
        if unicodedata.category(chr(i)) in ("Cc", "Cf") and chr(i) not in "\t\n\r"
    )
    assert render.escape_inline("a" + hostile + "b") == "ab"
    assert render.escape_block("a" + hostile + "b") == "```text\nab\n```"


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
    start, _ = pr_body.markers(SLOT)
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
        assert pr_body.get_slot(body, SLOT) == text


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
        assert pr_body.get_slot(body, SLOT) == text


def test_a_block_end_marker_inside_a_code_block_does_not_end_the_block():
    start, end = pr_body.markers(SLOT)
    body = (
        "Text\n<!-- pr-states:start -->\n---\n### CI States\n\n"
        "Other bot: <!-- slot:other:start -->ok<!-- slot:other:end -->\n"
        "```\n<!-- pr-states:end -->\n```\n"
        f"Label: {start}old{end}\n<!-- pr-states:end -->\n"
    )
    new = pr_body.set_slot(body, SLOT, "Label", "new")
    assert new == body.replace(f"{start}old{end}", f"{start}new{end}")


def test_results_json_that_loads_is_the_one_the_test_job_wrote(tmp_path):
    # A guard for the attacks above: the sample model itself round-trips through intake.
    folder = tmp_path / "ok"
    folder.mkdir()
    results.save(model(), str(folder))
    from ci import artifact

    assert artifact.load_results(str(folder)).cases[0].case_id == model().cases[0].case_id


# --- the head SHA: a push racing the report ---------------------------------------------------


def test_a_push_landing_after_the_slot_write_stops_the_comment_but_not_the_commit_status(
    fake, tmp_path, monkeypatch
):
    newer = "b" * 40
    fake.after("PATCH", r"/issues/7$", lambda server: server.heads.__setitem__(7, newer))
    folder = tmp_path / "r"
    folder.mkdir()
    results.save(model(), str(folder))
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--require-head", "--post") == 0
    assert fake.comments == {}  # the evidence of HEAD is not posted on a PR now at `newer`
    assert fake.statuses and all(s["sha"] == HEAD for s in fake.statuses)


# --- the API rate limit: one artifact must not spend it ---------------------------------------


def _regressions(count: int, name=lambda i: f"TestW.test_case_{i:05d}"):
    data = model().to_json()
    case = data["cases"][0]
    data["cases"] = [dict(case, case_id=name(i)) for i in range(count)]
    return data


def test_thousands_of_suites_are_refused_before_a_status_is_sent(fake, tmp_path, monkeypatch):
    data = model().to_json()
    data["files"] = [dict(data["files"][0], path=f"t/f{i}.py", suite=f"s{i}") for i in range(51)]
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    assert fake.requests == []


@pytest.mark.parametrize("suite", ["s\u202eevil", "a b", "x" * 101, "../s", ""])
def test_a_suite_name_that_is_not_one_is_refused(fake, tmp_path, monkeypatch, suite):
    data = model().to_json()
    data["files"][0]["suite"] = suite
    folder = _results_json(tmp_path, json.dumps(data).encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    assert fake.requests == []


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e308", "-5"])
@pytest.mark.parametrize("field", ["peak_mib", "budget_mib"])
def test_a_peak_or_cap_that_is_not_a_measurement_is_refused(
    fake, tmp_path, monkeypatch, field, value
):
    data = model().to_json()
    data["cases"][0]["modes"]["change"][field] = 1.5  # a marker replaced below, raw
    raw = json.dumps(data).replace(f'"{field}": 1.5', f'"{field}": {value}', 1)
    folder = _results_json(tmp_path, raw.encode())
    assert _post_results(fake, monkeypatch, folder) == 2
    assert fake.requests == []


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
    from ci import checks

    data = _regressions(1, name=lambda i: "test_\u202egnp.exe\u200b\x1b[31m")
    m = results.Results.from_json(json.loads(json.dumps(data)))
    create, _ = checks.requests(m, HEAD, "summary", "2026-01-01T00:00:00Z")
    (note,) = create["output"]["annotations"]
    assert note["title"] == "test_gnp.exe"


def test_a_step_summary_of_many_byte_names_stays_under_githubs_1_mib(fake, tmp_path, monkeypatch):
    data = _regressions(3000, name=lambda i: f"{i:05d}" + "\u754c" * 495)  # 3 bytes each
    folder = _results_json(tmp_path, json.dumps(data, ensure_ascii=False).encode())
    summary = tmp_path / "step-summary.md"
    args = ["--results", str(folder), "--summary", str(summary)]
    assert _report(fake, monkeypatch, *args) == 0
    text = summary.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 1024 * 1024
    assert "Shortened to fit" in text and "Environment:" in text


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
    assert fake.requests == []


def test_a_body_ending_in_an_unclosed_fence_gets_one_block_however_many_runs():
    body = "Text\n```\ncode without its closing fence\n"
    for text in ("a", "b", "c"):
        body = pr_body.set_slot(body, SLOT, "Label", text)
    assert body.count(pr_body.BLOCK_START) == 1 and pr_body.get_slot(body, SLOT) == "c"
    assert body.startswith("Text\n```\ncode without its closing fence\n")


def test_a_push_landing_during_the_slot_write_gets_the_slot_put_back(fake, tmp_path, monkeypatch):
    newer = "b" * 40
    pending = pr_body.set_slot("Author's text.\n", SLOT, "Label", ":hourglass_flowing_sand:")
    fake.bodies[7] = pending  # the newer run's pending job wrote this before our report
    fake.after("PATCH", r"/issues/7$", lambda server: server.heads.__setitem__(7, newer))
    folder = tmp_path / "r"
    folder.mkdir()
    results.save(model(), str(folder))
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--require-head", "--post") == 0
    assert fake.bodies[7] == pending  # not the old commit's :white_check_mark:
    assert fake.comments == {}


def test_a_newer_writers_slot_is_never_put_back_over(fake, tmp_path, monkeypatch):
    newer = "b" * 40
    fake.bodies[7] = pr_body.set_slot("Author's text.\n", SLOT, "Label", ":hourglass_flowing_sand:")

    def push_and_newer_report(server):
        server.heads[7] = newer
        server.bodies[7] = pr_body.set_slot(server.bodies[7], SLOT, "Label", ":x: newer")

    fake.after("PATCH", r"/issues/7$", push_and_newer_report)
    monkeypatch.setattr("ci.publish.Publisher.settle_s", 0)
    folder = tmp_path / "r"
    folder.mkdir()
    results.save(model(), str(folder))
    args = ["--results", str(folder), "--repo", "sgl/sglang", "--pr", "7", "--sha", HEAD]
    assert _report(fake, monkeypatch, *args, "--require-head", "--post") == 0
    assert pr_body.get_slot(fake.bodies[7], SLOT) == ":x: newer"
