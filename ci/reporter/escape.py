"""Untrusted text (test names, log excerpts, reasons, an environment record) made safe and
honest in what the bot posts: pure functions, no GitHub.

Safe: nothing can break the markdown, a table row, a code fence or the hidden markers the
publisher searches for; nothing can mention anyone, reference an issue, become a link or start
a workflow command (``ci.evidence.inert``). Honest: nothing is invisible. Control characters,
format characters (bidi overrides, zero-width ones), unpaired surrogates, combining marks,
spaces other than U+0020, line and paragraph separators and the fillers that render as nothing
(U+115F, U+1160, U+3164, U+FFA0, U+2800) are shown as their escape (``\\u3164``), never dropped:
dropping them made two different rows look the same. A test name is shown in ASCII alone
(``escape_name``), so no two different names render alike, not even in look-alike letters of
another script.
"""

import functools
import re
import unicodedata

from ci.evidence.inert import inert

# Only what can act mid-line: the text never starts a line, where '#', '-' or '+' would matter.
# A table and the ASCII codec, not re.sub with a template and a join per character: a report of
# 3,000 names of 500 CJK characters (test_ci_attacks) rendered in 13.1 s, now in 3.3 s.
_MD_PUNCT = str.maketrans({ch: "\\" + ch for ch in "\\`*_[]|~"})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINE_BREAKS = re.compile("\r\n|[\n\r\u2028\u2029]")
# GitHub finds mentions, issue references and bare links in the rendered text, after entities
# are decoded; a word joiner (shown escaped when it comes with the input) breaks each one.
_ACTS_ON_GITHUB = re.compile(r"(@|#|(?<![A-Za-z0-9])GH-|:(?=//)|(?<![A-Za-z0-9])www(?=\.))", re.I)
_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_SHOWN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me"))
# Letters and symbols that render as nothing at all (Unicode's default-ignorable fillers).
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


@functools.lru_cache(maxsize=4096)
def _hidden(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category in _NOT_SHOWN or (category == "Zs" and ch != " ") or ch in _FILLERS


def _escaped(ch: str) -> str:
    return ascii(ch)[1:-1]  # \x1b, \u3164, \U000e0001: ASCII, visible, one per character


def show_hidden(text: str, keep: str = "\t\n") -> str:
    """``text`` with every character a reader would not see written as its escape."""
    if text.isascii():
        return _ASCII_HIDDEN.sub(lambda m: m[0] if m[0] in keep else _escaped(m[0]), text)
    return "".join(_escaped(ch) if ch not in keep and _hidden(ch) else ch for ch in text)


def escape_inline(text) -> str:
    """One line of plain text, safe in a table cell, a heading or a link text."""
    text = show_hidden(_LINE_BREAKS.sub(" ", _ANSI.sub("", str(text))), keep="")
    return _markdown_inline(text)


def escape_name(text) -> str:
    """A test name (or path) in a table cell or heading: ASCII only, so two different names
    never render alike. A backslash is doubled, so an escape in the name cannot pose as one
    of ours."""
    return _escaped_name(str(text))


# A comment plan renders its comment up to three times to fit GitHub's limit, each time every
# name: 3,000 cases of 1.5 kB names (test_ci_attacks) escaped in 2.9 s, now once each.
@functools.lru_cache(maxsize=1 << 16)
def _escaped_name(text: str) -> str:
    return _markdown_inline(name_text(text))


def name_text(text) -> str:
    """A test name as plain ASCII text (a check-run annotation's title)."""
    text = str(text).replace("\\", "\\\\")
    return inert(text if text.isascii() and text.isprintable() else _ascii_only(text))


def _ascii_only(text: str) -> str:
    # ascii()'s escapes: the ASCII controls one by one, the rest as the codec writes them
    # (the same \xhh, \uhhhh, \Uhhhhhhhh), lone surrogates included.
    text = _ASCII_CONTROL.sub(lambda m: _escaped(m[0]), text)
    return text.encode("ascii", "backslashreplace").decode("ascii")


def _markdown_inline(text: str) -> str:
    # Entities first, so '<!--' and '-->' can never reach GitHub as comment markers.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.translate(_MD_PUNCT)
    return inert(_ACTS_ON_GITHUB.sub("\\1\u2060", text))  # no mentions, references or links


def visible(text) -> str:
    """Plain text (a check-run annotation): every hidden character shown, no workflow command."""
    return inert(show_hidden(_ANSI.sub("", str(text)).replace("\r\n", "\n")))


def escape_block(text) -> str:
    """Log text for a fenced code block: markers defused, fence chosen longer than any run."""
    text = inert(show_hidden(_LINE_BREAKS.sub("\n", _ANSI.sub("", str(text)))))
    # Inside a fence entities are not decoded, so a zero-width space defuses the markers.
    text = text.replace("<!--", "<\u200b!--").replace("-->", "--\u200b>")
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def safe_clip(escaped: str, limit: int) -> str:
    """Shorten already-escaped inline text without splitting an entity or an escape."""
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: max(0, limit - 1)]
    cut = re.sub(r"&#?[A-Za-z0-9]*$", "", cut)  # a partial &amp; / &#64;
    if (len(cut) - len(cut.rstrip("\\"))) % 2:  # a lone backslash would escape the ellipsis
        cut = cut[:-1]
    return cut + "\u2026"
