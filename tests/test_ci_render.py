"""Rendering, pure: what a reviewer reads (verdict words, the failed assertion, one short
environment line, a comment under 10 KB for the project's own evidence), and that no text from
a test can break the markdown, pose as another name or start a workflow command."""

import glob
import html
import re
import unicodedata
from dataclasses import replace

import hypothesis
import pytest
from ci_samples import FILE, file_run, model, sides, workspace_runs
from hypothesis import given, settings
from hypothesis import strategies as st

from ci.evidence import judge
from ci.evidence import model as evidence
from ci.reporter import checks, escape, render
from ci.reporter.pr_states import MISSING_LABEL

SLOT, HEAD = "dsv4-workspace", "c0ffee" + "0" * 34
NASTY = "test_`x`|y <!-- slot:dsv4:end --> *z* [l](u) @team\nFAIL: -->"


def rows(text):
    return [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]


def test_the_table_says_fixed_or_unchanged_and_shows_the_assertion_that_failed_unmodified():
    text = render.comment(model(), "dsv4", run_id=7, run_url="https://ci/7")
    assert text.startswith(render.comment_marker("dsv4") + "\n")
    header, grow, reuse = rows(text)
    assert header == "| Case | Verdict | sglang 0.5.23 | sglang 0.5.23 + this change |"
    assert "| fixed by this PR | Fail: AssertionError: 160.0 not less than" in grow
    assert grow.endswith("· peak 160.0 MiB | Pass · peak 96.0 MiB |")
    assert "| unchanged | Pass · peak 96.0 MiB | Pass · peak 96.0 MiB |" in reuse
    assert "**1** fixed by this PR (fail on sglang 0.5.23 and pass with" in text
    assert "[Run #7](https://ci/7)" in text


def test_the_comment_for_the_projects_own_evidence_is_under_10_kb():
    loaded = [evidence.load(p) for p in sorted(glob.glob("docs/evidence/fix-*/*/results.json"))]
    files = {f.path: f for r in loaded for f in r.files}
    cases = {c.key: c for r in loaded for c in r.cases}
    run = replace(loaded[0], files=tuple(files.values()), cases=tuple(cases.values()))
    text = render.comment(run, "dsv4", run_id=1, run_url="https://github.com/o/r/actions/runs/1")
    assert len(cases) >= 37 and len(text.encode()) <= 10 * 1024, len(text.encode())
    environment = next(line for line in text.splitlines() if line.startswith("Environment:"))
    assert len(environment) <= 250 and "overlay" not in environment


def test_the_environment_line_names_the_device_that_ran_the_tests():
    cpu_env = {"gpus": [{"name": "NVIDIA H200"}], "modes": {"change": {"cuda": "13.0"}}}
    runs = [file_run(m, [("test_grow", "pass", "", None)]) for m in ("unmodified", "change")]
    cpu = judge.build(runs, "cpu", sides(), {FILE: "s"}, [], environment=cpu_env)
    assert render.environment_line(cpu.environment, "cpu") == "CPU"
    line = render.environment_line(model().environment)
    assert line == (
        "NVIDIA H200 (driver 580.65) · torch 2.11.0+cu130 · CUDA 13.0 · sglang 0.5.23 · Python 3.12.3"
    )
    assert render.environment_line({"gpus": "x", "modes": [1]}) == "no CUDA"  # any shape
    assert "on cpu" in render.comment(cpu, "s")


@pytest.mark.parametrize(
    "runs, state, status",
    [
        (workspace_runs(), "success", "success"),
        (workspace_runs(grow_unmodified="pass"), "not-reproduced", "failure"),  # void
        (workspace_runs(grow_unmodified="skip"), "not-reproduced", "failure"),
    ],
    ids=["ok", "void-passes-unmodified", "void-skips-unmodified"],
)
def test_only_an_ok_run_posts_success_statuses(runs, state, status):
    run = model(runs)
    assert render.overall_state(run) == state
    ((posted, description),) = render.status_descriptions(run).values()
    assert posted == status and len(description) <= 140


def test_status_descriptions_fit_140_characters_with_any_suite_name():
    ((_, description),) = render.status_descriptions(model(suite="s" * 500)).values()
    assert len(description) <= 140 and "1 fixed by this PR" in description


def test_slot_text_is_a_state_and_a_link():
    assert (
        render.slot_text("success", 3, "https://ci/3")
        == ":white_check_mark: [Run #3](https://ci/3)"
    )
    assert render.slot_text("failure", note="a @b") == ":x: -- a @\u2060b"
    assert render.slot_text("missing-label") == MISSING_LABEL


def test_a_test_name_full_of_markdown_and_comment_markers_cannot_break_anything():
    run = model()
    first = run.cases[0]
    detail = NASTY + "\n```\n<!-- pr-states:end -->"
    modes = {**first.modes, "change": replace(first.modes["change"], outcome="fail", detail=detail)}
    run = judge.with_verdict(
        replace(run, cases=[replace(first, test=NASTY, modes=modes, kind="broken"), *run.cases[1:]])
    )
    text = render.comment(run, "dsv4")
    assert "<details><summary>Log excerpts (1)</summary>" in text  # collapsed
    assert text.count("<!--") == 1 and text.count("-->") == 1  # our own marker alone
    for line in rows(text):
        assert len(re.findall(r"(?<!\\)\|", line)) == 5 and "@team" not in line


def test_a_look_alike_name_is_ascii_in_the_table_and_in_the_reason_line():
    lookalike = "TestX.test_gr\u0430w"  # a Cyrillic a
    runs = [file_run(m, [("test_gr\u0430w", o, "boom", None)], path=FILE)
            for m, o in (("unmodified", "fail"), ("change", "fail"))]  # fmt: skip
    text = render.comment(judge.build(runs, "cuda", sides(), {FILE: "s"}, []), "s")
    assert "\u0430" not in text and lookalike not in text
    assert text.count("gr\\\\u0430w") >= 2  # the row and the reason


@pytest.mark.parametrize("fold", [False, True], ids=["open", "in-collapsed-details"])
def test_a_capped_body_says_truncated_and_never_ends_inside_a_fence(fold):
    block = escape.escape_block("x\n" * 5000)
    if fold:  # the log excerpts: the note must not be folded away with them
        block = f"<details><summary>Log excerpts</summary>\n\n{block}\n</details>"
    body = "head\n" + block + "\ntail\n"
    for limit in (100, 1000, 8000):
        capped = escape.cap(body, limit)
        assert len(capped.encode()) <= limit and "truncated" in capped
        assert capped.count("```") % 2 == 0
        assert capped.count("<details>") == capped.count("</details>")
    assert escape.cap("short\n", 100) == "short\n"
    assert len(escape.cap("\u00e9\n" * 1000, 500).encode()) <= 500  # bytes, not characters


def test_escape_block_picks_a_fence_longer_than_any_backtick_run():
    block = escape.escape_block("```` four\n<!-- hi -->")
    assert block.split("text", 1)[0] == "`````" and "<!--" not in block


@pytest.mark.parametrize(
    "text, shown",
    [
        ("tests/x.py::T.test_a", "tests/x.py::T.test_a"),  # ids stay copy-pasteable
        ("::error::pwned", ":\u2060:error::pwned"),
        ("  ::add-mask::x", "  :\u2060:add-mask::x"),
        ("a\n::warning::b", "a\n:\u2060:warning::b"),
        ("x ##[error]y", "x #\u2060#[error]y"),
    ],
)
def test_inert_breaks_only_what_the_runner_would_obey(text, shown):
    assert escape.inert(text) == shown


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_a_name_is_shown_in_ascii_one_to_one_and_escaped_for_markdown(name):
    doubled = name.replace("\\", "\\\\")
    one_by_one = "".join(ch if " " <= ch <= "~" else ascii(ch)[1:-1] for ch in doubled)
    assert escape.name_text(name) == escape.inert(one_by_one)
    shown = escape.escape_name(name)
    assert shown.replace(escape.JOINER, "").isascii() and "<" not in shown and "\n" not in shown
    assert not re.search(r"(?<!\\)[`*_\[\]|~]", shown.replace("\\\\", ""))


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


def test_safe_clip_backs_off_from_a_partial_entity_and_a_lone_backslash():
    assert render.safe_clip("abc &amp; def", 7) == "abc \u2026"
    assert render.safe_clip("ab\\|cd", 4) == "ab\u2026"
