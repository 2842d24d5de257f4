"""The marker comment that exempts a grow-while-held site (``tools/series/audit.py``):
``# grows-while-held: keeps-old-on-purpose <reason>``. Finds each line's comment with ``tokenize``
(never a string's text) and says whether a marker gives a visible reason. Pure functions of
source text; stdlib only, like the analysis itself (``grow_hook.py`` runs it as a plain file).
"""

import io
import re
import tokenize
import unicodedata

MARKER = re.compile(r"#\s*grows-while-held:\s*keeps-old-on-purpose\b[ \t:,-]*(?P<reason>.*)")
# Visible text: letters, digits, punctuation, symbols (not spaces, controls, format characters).
_VISIBLE = ("L", "N", "P", "S")


def comments(source: str) -> "dict[int, tuple[str, bool]]":
    """Each line's comment text (from ``tokenize``: never a string's or docstring's text), and
    whether the line holds nothing but the comment."""
    found, code_lines = {}, set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                code_lines.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass  # what was read so far stands; a marker beyond it exempts nothing
    return {n: (text, n not in code_lines) for n, text in found.items()}


def visible(text: str) -> bool:
    """Whether ``text`` has a character one can see (not only spaces, controls, format marks)."""
    return any(unicodedata.category(ch)[0] in _VISIBLE for ch in text)


def marker_reason(comment: str) -> "str | None":
    """The reason a marker comment gives, or None (no marker, or a reason with nothing visible)."""
    match = MARKER.search(comment)
    if not match or not visible(match.group("reason")):
        return None
    return match.group("reason").strip()


def marker_without_reason(comment: str) -> bool:
    """A keeps-old-on-purpose marker comment that does not say why (the hook refuses it)."""
    match = MARKER.search(comment)
    return bool(match) and not visible(match.group("reason"))


def bare_markers(source: str) -> "list[int]":
    """The lines whose comment is a marker without a visible reason."""
    return sorted(n for n, (text, _) in comments(source).items() if marker_without_reason(text))
