"""Rendering, pure: what a reviewer reads; no test text breaks the markdown."""

import glob
import html
import re
import string
import unicodedata
from dataclasses import replace

import pytest
from ci_samples import FILE, file_run, model, sides, workspace_runs
from hypothesis import given, settings
from hypothesis import strategies as st

from ci.evidence import judge
from ci.evidence import model as evidence
from ci.reporter import escape, render
from ci.reporter.pr_states import MISSING_LABEL

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
    for odd in ({"gpus": "x", "modes": [1]}, {"gpus": [7], "modes": {"change": "x"}, "git": "x"}):
        assert render.environment_line(odd).endswith("no CUDA")  # a record of any shape
    assert "on cpu" in render.comment(cpu, "s")


@pytest.mark.parametrize(
    "runs, suite, state, status",
    [
        (workspace_runs(), "s" * 500, "success", "success"),
        (workspace_runs(grow_unmodified="pass"), "s", "not-reproduced", "failure"),  # void
        (workspace_runs(grow_unmodified="skip"), "s", "not-reproduced", "failure"),
    ],
    ids=["ok-any-suite-name", "void-passes-unmodified", "void-skips-unmodified"],
)
def test_only_an_ok_run_posts_success_statuses_of_140_characters(runs, suite, state, status):
    run = model(runs, suite=suite)
    assert render.overall_state(run) == state
    (posted,) = render.statuses(run, "s")
    description = posted["description"]
    assert posted["state"] == status and len(description) <= 140 and "1 " in description


def test_slot_text_is_a_state_and_a_link():
    assert render.slot_text("success", 3, "https://ci/3") == (
        ":white_check_mark: [Run #3](https://ci/3)"
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


# Hangul fillers, a combining joiner, a variation selector, zero-width, braille and no-break
# spaces, a Cyrillic o, the escape written out, a combining and a precomposed accent.
LOOK_ALIKES = [
    "test_grow",
    *(f"test_grow{c}" for c in "\u3164\u115f\u034f\ufe0f\u200b\u2800\u00a0"),
    "test_gr\u043ew",
    "test_grow\\u3164",
    "test_gro\u0301w",
    "test_gr\u00f3w",
]


def test_two_different_case_names_never_render_alike_in_rows_reasons_or_annotations():
    m = model()
    cases = [replace(m.cases[0], test=name, kind="broken") for name in LOOK_ALIKES]
    m = judge.with_verdict(replace(m, cases=cases))
    text = render.comment(m, "s")
    names = [html.unescape(row).split(" | ")[0] for row in rows(text)[1:]]
    assert len(set(names)) == len(LOOK_ALIKES) and all(name.isascii() for name in names)
    # no letter of another script or invisible character passes for ours, in the reason either
    assert not (set("".join(LOOK_ALIKES)) - set(string.printable)) & set(text)
    assert "test\\_grow\\\\u3164, test\\_grow\\\\u115f and 9 more" in text
    create = render.check_run(m, "c0ffee" + "0" * 34, "s", "2026-01-01T00:00:00Z")["create"]
    titles = [note["title"] for note in create["output"]["annotations"]]
    assert len(set(titles)) == len(LOOK_ALIKES) and all(t.isascii() for t in titles)


ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
def test_a_name_is_shown_in_ascii_escaped_for_markdown_and_one_to_one(a, b):
    for name in (a, b):
        shown = render.escape_name(name)
        assert shown.replace(escape.JOINER, "").isascii() and not set("<>\n") & set(shown)
        assert not re.search(r"(?<!\\)[`*_\[\]|~]", shown.replace("\\\\", ""))
    if a != b:
        assert render.escape_name(a) != render.escape_name(b)
        assert escape.name_text(a) != escape.name_text(b)


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


@pytest.mark.parametrize(
    "text, never",
    [
        ("ping @maintainers, see GH-12 and @a-b", r"@[A-Za-z0-9]|GH-\d"),
        ("fixes #1 and sgl-project/sglang#1", r"#\d"),
        ("[l](https://evil) www.evil.com", r"(?<!\\)\]\(|https://|www\."),
        ("::error::pwned\n  ::add-mask::x ##[error]y", r"(?m)^\s*::|##\["),
        ("a\u202eb\u200bc\u2066d", "[\u202e\u200b\u2066]"),
    ],
)
def test_a_name_can_neither_mention_link_command_nor_hide_after_entities_are_decoded(text, never):
    # GitHub decodes entities (&#64; is '@') before it finds mentions, references and links.
    for shown in (render.escape_name(text), html.unescape(render.escape_inline(text))):
        assert not re.search(never, shown), shown
    assert (
        escape.inert("tests/x.py::T.test_a\n::error::x") == "tests/x.py::T.test_a\n:\u2060:error::x"
    )


def test_a_log_excerpt_is_fenced_longer_than_any_backtick_run_in_it():
    block = escape.escape_block("```` four\n<!-- hi -->")
    assert block.split("text", 1)[0] == "`````" and "<!--" not in block


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


def test_a_clipped_escaped_text_splits_no_entity_and_leaves_no_lone_backslash():
    assert render.clip("abc &amp; def", 7) == "abc \u2026"
    assert render.clip("ab\\|cd", 4) == "ab\u2026"
