"""A comment's or PR body's own text and raw HTML as CommonMark reads them, behind ``/run-ci``
approvals and the PR-body slot: code, quotes, lists and headings never approve nor hold it."""

import re

from markdown_it import MarkdownIt

_PARSER = MarkdownIt("commonmark")
_SHOWN_AS_IS = re.compile(r"<(pre|script|style|textarea)\b", re.I)  # HTML blocks of raw text
LINE_END = re.compile(r"\r\n|\r|\n")  # CommonMark's line endings, and no others
_PROBE = "a paragraph after the text"


def own_lines(text: str) -> list[str]:
    """The lines of the top-level paragraphs; a code span, HTML, link or emphasis is a NUL."""
    tokens, lines = _PARSER.parse(text), []
    for before, token in zip(tokens, tokens[1:], strict=False):
        if token.type == "inline" and before.type == "paragraph_open" and before.level == 0:
            parts, depth = [], 0  # inside a link or emphasis, over line ends too
            for c in token.children or ():
                depth += c.nesting
                own = c.type == "text" and not depth
                parts.append(c.content if own else "\n" if c.type.endswith("break") else "\0")
            lines += "".join(parts).split("\n")
    return lines


def raw_html(text: str) -> list[tuple[int, int, str]]:
    """(first line, line after the last, HTML) of each piece of raw HTML outside code, quotes
    and lists: an HTML block's content, or an HTML span of a top-level paragraph."""
    tokens, found = _PARSER.parse(text), []
    for before, token in zip([None, *tokens], tokens, strict=False):
        if token.type == "html_block" and not token.level:
            if not _SHOWN_AS_IS.match(token.content.lstrip()):
                found.append((*token.map, token.content))
        elif token.type == "inline" and before.type == "paragraph_open" and not before.level:
            found += [(*token.map, c.content) for c in token.children if c.type == "html_inline"]
    return found


def open_fence(text: str) -> str | None:
    """The line that closes a code block or raw HTML block (``<pre>``) ``text`` leaves open: the
    one that swallows a paragraph put after it."""
    last = _PARSER.parse(f"{text}\n\n{_PROBE}")[-1]
    if last.type == "fence":
        return last.markup
    raw = last.type == "html_block" and _SHOWN_AS_IS.match(last.content.lstrip())
    return f"</{raw[1].lower()}>" if raw else None
