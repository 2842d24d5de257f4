"""Pure rendering: evidence table, slot text, statuses, escaping and the size limit."""

import re
from dataclasses import replace

import hypothesis
from ci_samples import FILE, file_run, model, sides, workspace_runs
from hypothesis import strategies as st

from ci.evidence import judge
from ci.reporter import render
from ci.reporter.pr_states import BODY_LIMIT, MISSING_LABEL

NASTY = "test_`x`|y <!-- slot:dsv4:end --> *z* [l](u) @team\nFAIL: -->"


def test_evidence_table_names_each_side_by_what_it_ran_and_shows_the_peaks():
    text = render.comment(
        model(), "dsv4", run_id=7, run_url="https://ci/7", artifacts_url="https://ci/7#a"
    )
    assert text.startswith(render.comment_marker("dsv4") + "\n")
    assert "| Case | Kind | sglang 0.5.23 | sglang 0.5.23 + this change |" in text
    assert "fail on sglang 0.5.23 and pass on sglang 0.5.23 + this change" in text
    assert "main" not in text
    row = next(line for line in text.splitlines() if "grow" in line and line.startswith("|"))
    assert "| regression | Fail · peak 160.0 MiB | Pass · peak 96.0 MiB |" in row
    assert "| preservation | Pass · peak 96.0 MiB | Pass · peak 96.0 MiB |" in text
    assert "NVIDIA H200 (driver 580.65)" in text and "torch 2.11.0" in text
    assert "[Run #7](https://ci/7)" in text and "(https://ci/7#a)" in text


PROOF = "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py"
# A CPU run of a CUDA build of torch on a machine with a GPU: only the CPU ran the tests.
CPU_RUN = {
    "gpus": [{"name": "NVIDIA H200", "driver": "580.65", "memory": "143771 MiB"}],
    "modes": {
        "change": {"torch": "2.11.0+cu130", "cuda": "13.0", "cuda_available": False},
    },
}


def cpu_proof_model():
    runs = [
        file_run(mode, [("test_grow", "pass", "", None)], path=PROOF)
        for mode in ("unmodified", "change")
    ]
    return judge.build(runs, "cpu", sides(), {PROOF: "base-a-test-cpu"}, [], environment=CPU_RUN)


def test_the_heading_names_what_ran_and_the_environment_the_device_that_ran():
    text = render.comment(cpu_proof_model(), "dsv4")
    heading = next(line for line in text.splitlines() if line.startswith("### "))
    assert heading.endswith(f"A/B of {render.escape_inline(PROOF)} on cpu")
    environment = next(line for line in text.splitlines() if line.startswith("Environment:"))
    assert environment.startswith("Environment: CPU") and "torch 2.11.0+cu130" in environment
    assert "CUDA" not in environment and "H200" not in environment
    assert "A/B of the registered tests on cuda" in render.comment(model(), "dsv4")


def test_a_test_name_full_of_markdown_and_comment_markers_cannot_break_anything():
    m = model()
    first = m.cases[0]  # names reach us from logs, so assume anything
    excerpt = NASTY + "\n```\n<!-- pr-states:end -->"
    first.modes["unmodified"] = replace(first.modes["unmodified"], detail=excerpt)
    m = replace(m, cases=[replace(first, test=NASTY), *m.cases[1:]])
    text = render.comment(m, "dsv4")
    # The only comment markers left are our own hidden marker.
    assert text.count("<!--") == 1 and text.count("-->") == 1
    for line in text.splitlines():
        if line.startswith("| ") and "Case" not in line and "---" not in line:
            assert len(re.findall(r"(?<!\\)\|", line)) == 5  # 4 cells, no extra columns


def test_escape_inline_defuses_markers_pipes_backticks_newlines_and_mentions():
    out = render.escape_inline(NASTY)
    assert "\n" not in out and "<!--" not in out and "-->" not in out and "@team" not in out
    assert "\\|" in out and "\\`" in out and "|" not in out.replace("\\|", "")


def test_escape_block_picks_a_fence_longer_than_any_backtick_run():
    block = render.escape_block("```` four\n<!-- hi -->")
    fence = block.split("text", 1)[0]
    assert fence == "`````" and "<!--" not in block and "-->" not in block


def test_a_huge_comment_is_shrunk_under_the_limit_with_a_pointer_to_the_artifacts():
    m = model()
    m = replace(m, cases=m.cases * 2000)  # thousands of rows and excerpts
    text = render.comment(m, "dsv4", artifacts_url="https://ci/7#artifacts")
    assert len(text) <= BODY_LIMIT
    assert "Shortened to fit" in text and "https://ci/7#artifacts" in text
    assert "more cases" in text


def test_status_descriptions_fit_140_characters_even_with_long_suite_names():
    statuses = render.status_descriptions(model(suite="s" * 500))
    assert all(len(d) <= 140 for _, d in statuses.values())
    ((state, description),) = statuses.values()
    assert state == "success" and "1 regression" in description


def test_slot_text_states():
    assert (
        render.slot_text("success", 3, "https://ci/3")
        == ":white_check_mark: [Run #3](https://ci/3)"
    )
    assert render.slot_text("failure") == ":x:"
    assert render.slot_text("missing-label") == MISSING_LABEL
    assert MISSING_LABEL == ":x: **Missing `run-ci` label** -- add it to run CI tests."


def test_a_listed_regression_that_passes_unmodified_is_reported_as_not_reproducing():
    m = model(workspace_runs(grow_unmodified="pass"))
    assert render.overall_state(m) == "not-reproduced"
    text = render.comment(m, "dsv4")
    assert "does not reproduce the bug" in text
    assert f"{FILE.replace('_', chr(92) + '_')}" in text  # the file is named in the warning
    assert "does not reproduce the bug" in next(iter(render.status_descriptions(m).values()))[1]


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_a_test_name_is_shown_as_ascii_writes_each_character_and_its_markdown_escaped(name):
    """The fast path (a table and the ASCII codec) against the definition, one character at
    a time: printable ASCII as it is, anything else as ``ascii()`` writes it; then each
    markdown character after a backslash."""
    from ci.evidence.inert import inert
    from ci.reporter import escape

    doubled = name.replace("\\", "\\\\")
    one_by_one = "".join(ch if " " <= ch <= "~" else ascii(ch)[1:-1] for ch in doubled)
    text = escape.name_text(name)
    assert text == inert(one_by_one)
    entities = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    marked = "".join("\\" + ch if ch in "\\`*_[]|~" else ch for ch in entities)
    assert escape.escape_name(name) == inert(escape._ACTS_ON_GITHUB.sub("\\1\u2060", marked))
