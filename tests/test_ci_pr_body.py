"""The PR-body CI States block: only our slot changes, markers as CommonMark reads them."""

import pytest

from ci.reporter import pr_states
from ci.reporter.pr_states import BLOCK_END, BLOCK_START

SLOT = "dsv4-workspace"
OTHER = (
    f"{BLOCK_START}\n---\n### CI States\n\n"
    "Latest PR Test (Base): <!-- slot:pr-test:start -->:x: [Run #1](https://r/1)"
    f"<!-- slot:pr-test:end -->\n{BLOCK_END}"
)
BLOCK = f"\n{BLOCK_START}\n---\n### CI States\n\nL: <!-- slot:s:start -->t<!-- slot:s:end -->\n"


@pytest.mark.parametrize(
    "body, expected",
    [
        ("Motivation\n\nFix it.", f"Motivation\n\nFix it.\n{BLOCK}{BLOCK_END}"),  # upstream's shape
        (None, BLOCK[1:] + BLOCK_END),  # GitHub sends null for an empty description
        ("", BLOCK[1:] + BLOCK_END),
        ("Windows author\r\n", ("Windows author\r\n" + BLOCK + BLOCK_END).replace("\n", "\r\n")
         .replace("\r\r\n", "\r\n")),
        ("Text\n```\ncode without its closing fence\n",
         f"Text\n```\ncode without its closing fence\n\n```\n{BLOCK}{BLOCK_END}"),
        ("Log:\n<PRE>\nno closing tag", f"Log:\n<PRE>\nno closing tag\n\n</pre>\n{BLOCK}{BLOCK_END}"),
    ],
    ids=["text", "null", "empty", "crlf", "unclosed-fence-closed-first", "unclosed-pre-closed-first"],
)  # fmt: skip
def test_the_block_is_added_at_the_end_in_upstreams_shape(body, expected):
    assert pr_states.set_slot(body, "s", "L", "t") == expected
    assert pr_states.set_slot(expected, "s", "L", "u") == expected.replace(">t<", ">u<")


def test_our_line_joins_an_existing_block_and_rewrites_change_only_our_text():
    author = "Author text with <!-- a comment --> and | pipes\r\n\r\n"
    first = pr_states.set_slot(author + OTHER + "\r\ntrailer", SLOT, "L", "one")
    assert first.startswith(author + OTHER[: -len(BLOCK_END)])
    assert pr_states.get_slot(first, "pr-test") == ":x: [Run #1](https://r/1)"
    second = pr_states.set_slot(first, SLOT, "L", "two")
    assert second == first.replace(">one<", ">two<")
    assert pr_states.set_slot(second, SLOT, "L", "two") == second  # idempotent


@pytest.mark.parametrize("text", ["two\nlines", "x <!-- y", "x --> y", "cr\r"])
def test_slot_text_that_could_break_the_block_is_refused(text):
    with pytest.raises(ValueError):
        pr_states.set_slot("", SLOT, "L", text)
    with pytest.raises(ValueError):
        pr_states.markers("bad name -->")


SHOWN = "<!-- slot:s:start -->shown<!-- slot:s:end -->"
EXAMPLES = {
    "outside-the-block": f"Quoting: {SHOWN}",
    "fenced": f"```\n{BLOCK_START}\nL: {SHOWN}\n{BLOCK_END}\n```",
    "tilde-fenced": f"~~~~\n{BLOCK_START}\nL: {SHOWN}\n{BLOCK_END}\n~~~~",
    "fenced-with-info": f"  ```markdown\n{BLOCK_START}\nL: {SHOWN}\n{BLOCK_END}\n  ```",
    "fenced-crlf": f"```\r\n{BLOCK_START}\r\nL: {SHOWN}\r\n{BLOCK_END}\r\n```",
    "indented": f"    {BLOCK_START}\n    L: {SHOWN}\n    {BLOCK_END}",
    "inline-code": f"`{BLOCK_START} L: {SHOWN} {BLOCK_END}`",
    "pre": f"<pre>\n{BLOCK_START}\nL: {SHOWN}\n{BLOCK_END}\n</pre>",
    "quoted": f"> {BLOCK_START}\n> L: {SHOWN}\n> {BLOCK_END}",
}


@pytest.mark.parametrize("example", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_the_authors_example_of_the_block_is_never_edited(example):
    body = pr_states.set_slot(f"Intro\n\n{example}\n", "s", "L", "ours")
    assert body.startswith(f"Intro\n\n{example}\n") and pr_states.get_slot(body, "s") == "ours"
    again = pr_states.set_slot(body, "s", "L", "again")
    assert again.count(BLOCK_START) == body.count(BLOCK_START)
    assert again == body.replace(">ours<", ">again<")


@pytest.mark.parametrize(
    "inside",
    [
        "```\n<!-- pr-states:end -->\n```\n",  # an end marker in code does not end the block
        "mine: <!-- slot:dsv4-workspace:start -->the author's own words\n",  # never closed
    ],
    ids=["end-marker-in-code", "unclosed-slot-start"],
)
def test_the_authors_text_inside_the_block_is_never_taken_for_our_slot(inside):
    start, end = pr_states.markers(SLOT)
    other = "Other: <!-- slot:o:start -->ok<!-- slot:o:end -->\n"
    head = f"Text\n{BLOCK_START}\n---\n### CI States\n\n{other}"
    body = f"{head}{inside}Label: {start}old{end}\n{BLOCK_END}\n"
    for text in (":hourglass_flowing_sand:", ":x:"):
        new = pr_states.set_slot(body, SLOT, "Label", text)
        assert new == body.replace(f"{start}old{end}", f"{start}{text}{end}")
