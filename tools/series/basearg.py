"""The base a verb works against, from its command line: a release (``--version``, else
``patches/BASE``'s ``release:``) or a commit of an upstream git checkout (``--checkout PATH``,
else ``$SGLANG_CHECKOUT``, with ``--rev REV``, else ``patches/BASE``'s ``git:``, else HEAD).
One helper for every verb that takes a base: ``add_arguments`` declares the two options,
``resolve`` turns them into a ``Where``; bad input is one line and exit 2.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from tools.series import base, usage
from tools.series.seriesdir import Base

CHECKOUT_ENV = "SGLANG_CHECKOUT"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--checkout",
        metavar="PATH",
        help="an upstream sglang git checkout as the base instead of a release "
        f"(default: ${CHECKOUT_ENV}, unless --version is given)",
    )
    parser.add_argument(
        "--rev", help="the checkout's commit (default: patches/BASE's git:, else HEAD)"
    )


@dataclass(frozen=True)
class Where:
    """A resolved base: ``version`` for a release, or ``checkout`` and its full ``commit``."""

    version: str | None
    checkout: Path | None = None
    commit: str | None = None

    @property
    def name(self) -> str:
        """How report lines name it: ``sglang==0.5.23`` or ``sglang @ 1a2b3c4d5e6f``."""
        return f"sglang=={self.version}" if self.commit is None else f"sglang @ {self.commit[:12]}"

    @property
    def short(self) -> str:
        """A folder-name part: ``0.5.23`` or ``1a2b3c4d5e6f``."""
        return self.version if self.commit is None else self.commit[:12]

    def materialize(self, dest, only=None) -> Path:
        """A fresh repository at ``dest`` whose HEAD, tagged ``base``, is this base; a
        release's as a sparse checkout of the paths ``only`` names, when given. A checkout's
        is always whole: its own hooks and collector read the rest of its tree."""
        if self.commit is None:
            return base.materialize(self.version, dest, only)
        return base.materialize_checkout(self.checkout, self.commit, dest)

    def upstream(self, pinned: Base) -> Base:
        """This base as upstream knows it (labels, ``git checkout``), with ``pinned``'s files."""
        if self.commit is None:
            return Base(self.version, pinned.files)
        return Base(None, pinned.files, self.commit, pinned.upstream)


def checkout_given(args) -> str | None:
    """``--checkout``, else ``$SGLANG_CHECKOUT`` unless a release was asked for by name."""
    if getattr(args, "checkout", None):
        return args.checkout
    return None if getattr(args, "version", None) else os.environ.get(CHECKOUT_ENV) or None


def resolve(args, pinned: Base) -> Where:
    """The base ``args`` name, ``pinned`` (patches/BASE) filling in what they leave out."""
    checkout, rev, version = checkout_given(args), args.rev, getattr(args, "version", None)
    if checkout and version:
        raise usage("--version and --checkout name two bases; give one")
    if checkout:
        return Where(None, Path(checkout), base.commit_of(checkout, rev or pinned.git or "HEAD"))
    if rev:
        raise usage(f"--rev {rev}: of which checkout? give --checkout PATH or set ${CHECKOUT_ENV}")
    version = version or pinned.version
    if version is None:
        raise usage(
            f"patches/BASE is upstream commit {pinned.git[:12]}, a git base: give "
            f"--checkout PATH (or set ${CHECKOUT_ENV}) of an sglang checkout that has it"
        )
    return Where(version)
