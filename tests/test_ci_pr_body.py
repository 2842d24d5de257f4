"""The PR-body CI States block: only our slot's text changes, every other byte stays."""

import pytest

from ci.reporter import pr_states

OTHER = (
    "<!-- pr-states:start -->\n---\n### CI States\n\n"
    "Latest PR Test (Base): <!-- slot:pr-test:start -->:x: [Run #1](https://r/1)"
    "<!-- slot:pr-test:end -->\n<!-- pr-states:end -->"
)


def test_block_is_created_at_the_end_of_the_body_in_upstreams_shape():
    body = pr_states.set_slot("Motivation\n\nFix it.", "dsv4", "Latest PR Test (DSV4)", ":x: no")
    assert body == (
        "Motivation\n\nFix it.\n\n<!-- pr-states:start -->\n---\n### CI States\n\n"
        "Latest PR Test (DSV4): <!-- slot:dsv4:start -->:x: no<!-- slot:dsv4:end -->\n"
        "<!-- pr-states:end -->"
    )


def test_empty_or_null_body_gets_just_the_block():
    assert pr_states.set_slot(None, "s", "L", "t").startswith("<!-- pr-states:start -->\n")
    assert pr_states.set_slot("", "s", "L", "t") == pr_states.set_slot(None, "s", "L", "t")


def test_our_line_is_added_before_the_end_of_an_existing_block_keeping_other_slots():
    author = "Author text with <!-- a comment --> and | pipes\n\n"
    body = pr_states.set_slot(author + OTHER, "dsv4", "Latest PR Test (DSV4)", "ok")
    assert body.startswith(author + OTHER[: -len(pr_states.BLOCK_END)])
    assert body.endswith(
        "Latest PR Test (DSV4): <!-- slot:dsv4:start -->ok<!-- slot:dsv4:end -->\n"
        "<!-- pr-states:end -->"
    )
    assert pr_states.get_slot(body, "pr-test") == ":x: [Run #1](https://r/1)"


def test_rewriting_our_slot_changes_only_the_text_between_its_markers():
    first = pr_states.set_slot("Body\r\n" + OTHER + "\r\ntrailer", "dsv4", "L", "one")
    second = pr_states.set_slot(first, "dsv4", "L", "two")
    assert second == first.replace("one", "two")
    assert pr_states.set_slot(second, "dsv4", "L", "two") == second  # idempotent


def test_crlf_bodies_get_crlf_lines():
    body = pr_states.set_slot("Windows author\r\n", "s", "L", "t")
    assert "\n" not in body.replace("\r\n", "")


def test_slot_markers_outside_the_block_are_not_ours_to_edit():
    quoted = "Quoting: <!-- slot:dsv4:start -->old<!-- slot:dsv4:end -->\n\n"
    body = pr_states.set_slot(quoted, "dsv4", "L", "new")
    assert body.startswith(quoted)
    assert pr_states.get_slot(body, "dsv4") == "new"


@pytest.mark.parametrize("text", ["two\nlines", "x <!-- y", "x --> y", "cr\r"])
def test_slot_text_that_could_break_the_block_is_refused(text):
    with pytest.raises(ValueError):
        pr_states.set_slot("", "dsv4", "L", text)


def test_slot_names_are_restricted():
    with pytest.raises(ValueError):
        pr_states.markers("bad name -->")


SHOWN = "<!-- slot:s:start -->shown<!-- slot:s:end -->"
SLOT = "dsv4-workspace"


@pytest.mark.parametrize(
    "example",
    [
        f"```\n{pr_states.BLOCK_START}\nL: {SHOWN}\n{pr_states.BLOCK_END}\n```",
        f"    {pr_states.BLOCK_START}\n    L: {SHOWN}\n    {pr_states.BLOCK_END}",  # indented
        f"`{pr_states.BLOCK_START} L: {SHOWN} {pr_states.BLOCK_END}`",  # inline code
        f"<pre>\n{pr_states.BLOCK_START}\nL: {SHOWN}\n{pr_states.BLOCK_END}\n</pre>",
        f"> {pr_states.BLOCK_START}\n> L: {SHOWN}\n> {pr_states.BLOCK_END}",  # a quote
    ],
)
def test_the_authors_example_of_the_block_is_never_edited(example):
    body = pr_states.set_slot(f"Intro\n\n{example}\n", "s", "L", "ours")
    assert body.startswith(f"Intro\n\n{example}\n") and pr_states.get_slot(body, "s") == "ours"
    again = pr_states.set_slot(body, "s", "L", "again")
    assert again.count(pr_states.BLOCK_START) == body.count(pr_states.BLOCK_START)
    assert again == body.replace(">ours<", ">again<")


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


def test_a_body_ending_in_an_unclosed_fence_gets_one_block_however_many_runs():
    body = "Text\n```\ncode without its closing fence\n"
    for text in ("a", "b", "c"):
        body = pr_states.set_slot(body, SLOT, "Label", text)
    assert body.count(pr_states.BLOCK_START) == 1 and pr_states.get_slot(body, SLOT) == "c"
    assert body.startswith("Text\n```\ncode without its closing fence\n")
