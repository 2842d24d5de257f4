"""The one escape for untrusted text bound for GitHub (THREATS R3). ``inert``: no line starts a
workflow command (a word joiner breaks ``::`` and ``##[``). The markdown escapes add: nothing
breaks a row, a fence or our markers, mentions or links; nothing is invisible; names are ASCII."""

import functools
import re
import unicodedata

JOINER = "\u2060"
_COMMAND = re.compile(r"(?<!\S):(?=:)|#(?=#\[)")
_MD_PUNCT = str.maketrans({ch: "\\" + ch for ch in "\\`*_[]|~"})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINE_BREAKS = re.compile("\r\n|[\n\r\u2028\u2029]")
# GitHub finds mentions, issue references and bare links after entities are decoded.
_ACTS_ON_GITHUB = re.compile(r"(@|#|(?<![A-Za-z0-9])GH-|:(?=//)|(?<![A-Za-z0-9])www(?=\.))", re.I)
_NOT_SHOWN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me"))
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")  # render as nothing at all


def inert(text) -> str:
    """``text`` (str() of any value) in which no line starts a workflow command."""
    return _COMMAND.sub(lambda m: m[0] + JOINER, str(text))


def printable(text) -> str:
    """``text`` with every character that does not print written as its escape (``\\n``)."""
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in str(text))


def one_line(text) -> str:
    """``text`` as one line for a log: ``printable`` and ``inert``."""
    return inert(printable(text))


@functools.lru_cache(maxsize=4096)
def _hidden(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category in _NOT_SHOWN or (category == "Zs" and ch != " ") or ch in _FILLERS


def _escaped(ch: str) -> str:
    return ascii(ch)[1:-1]  # \x1b, \u3164, \U000e0001: ASCII, visible, one per character


def show_hidden(text: str) -> str:
    """``text`` with every character a reader would not see (but tabs and line ends) escaped."""
    return "".join(_escaped(ch) if ch not in "\t\n" and _hidden(ch) else ch for ch in text)


def escape_inline(text) -> str:
    """One line of plain text, safe in a table cell, a heading or a link text."""
    return _markdown_inline(show_hidden(_LINE_BREAKS.sub(" ", _ANSI.sub("", str(text)))))


@functools.lru_cache(maxsize=1 << 16)
def escape_name(text) -> str:
    """A test name (or path) in markdown: ASCII only (``name_text``)."""
    return _markdown_inline(name_text(text))


def name_text(text) -> str:
    """A test name as plain ASCII, a backslash doubled (it cannot pose as one of our escapes)."""
    text = str(text).replace("\\", "\\\\")
    if not (text.isascii() and text.isprintable()):
        text = printable(text).encode("ascii", "backslashreplace").decode("ascii")
    return inert(text)


def _markdown_inline(text: str) -> str:
    # Entities first, so '<!--' and '-->' can never reach GitHub as comment markers.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return inert(_ACTS_ON_GITHUB.sub("\\1" + JOINER, text.translate(_MD_PUNCT)))


def visible(text) -> str:
    """Plain text (a check-run annotation, a log excerpt): one kind of line break, every hidden
    character shown, no workflow command."""
    return inert(show_hidden(_LINE_BREAKS.sub("\n", _ANSI.sub("", str(text)))))


def escape_block(text) -> str:
    """Log text as a fenced code block: markers defused, the fence longer than any run."""
    # Inside a fence entities are not decoded, so a zero-width space defuses the markers.
    text = visible(text).replace("<!--", "<\u200b!--").replace("-->", "--\u200b>")
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def clip(text: str, limit: int) -> str:
    """``text`` in ``limit`` characters, an ellipsis where cut, never inside an entity or escape."""
    if len(text) <= limit:
        return text
    cut = re.sub(r"&#?[A-Za-z0-9]*$", "", text[: max(0, limit - 1)])  # a partial &amp;
    if (len(cut) - len(cut.rstrip("\\"))) % 2:  # a lone backslash would escape the ellipsis
        cut = cut[:-1]
    return cut + "\u2026"


_FOLD_END = "\n</details>\n"
TRUNCATED = "\n\n_(truncated: the full text is report.md in the run's artifacts)_\n"


def cap(body: str, limit: int) -> str:
    """``body`` within ``limit`` characters and UTF-8 bytes, cut at a line end outside a fence,
    with a visible "truncated"."""
    if len(body) <= limit and len(body.encode("utf-8")) <= limit:
        return body
    room = limit - len(TRUNCATED) - len(_FOLD_END)
    cut = body.encode("utf-8")[:room].decode("utf-8", "ignore")[:room]
    cut, fence, opened, at, folded = cut[: cut.rfind("\n") + 1], None, 0, 0, False
    for line in cut.splitlines(keepends=True):
        run = re.match(r"`{3,}|~{3,}", line)
        if fence is None and run:
            fence, opened = run[0], at
        elif fence and run and run[0][0] == fence[0] and len(run[0]) >= len(fence):
            fence = None
        elif fence is None and line.startswith(("<details>", "</details>")):
            folded = line.startswith("<details>")
        at += len(line)
    # A cut inside a collapsed section closes it, or the note would be folded away with it.
    return (cut if fence is None else cut[:opened]) + (_FOLD_END if folded else "") + TRUNCATED
