"""How the grow-while-held analysis (``tools/series/audit.py``) gets a module's text: from a
regular file only, never through a link, at most ``MAX_BYTES``, decoded as PEP 263 says; and the
one error for a file it cannot read or analyse. Stdlib only, like the analysis itself
(``grow_hook.py`` runs it as a plain file).
"""

import io
import os
import stat
import tokenize

MAX_BYTES = 4 * 1024 * 1024  # the largest module read: sglang's biggest is under 300 kB


class Unreadable(Exception):
    """A file the audit cannot read or analyse; the message says why in one line."""


def decode(data: bytes) -> str:
    """Source bytes as text, honouring a PEP 263 coding line or a BOM (Unreadable if not)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise Unreadable(f"cannot decode: {exc}") from None


def read_source(path: "str | os.PathLike") -> str:
    """A module's text, read without following a link, only from a regular file of at most
    ``MAX_BYTES``, decoded as PEP 263 says; anything else raises ``Unreadable``."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            raise Unreadable("a link, not followed")
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("not a regular file")
        if info.st_size > MAX_BYTES:
            raise Unreadable(f"{info.st_size} bytes, over the {MAX_BYTES}-byte bound")
        fd = os.open(path, flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Unreadable("not a regular file")
            data = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise Unreadable(exc.strerror or type(exc).__name__) from None
    if len(data) > MAX_BYTES:
        raise Unreadable(f"over the {MAX_BYTES}-byte bound")
    return decode(data)
