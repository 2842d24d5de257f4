"""Load the ``patches/`` directory: the series order, the BASE pin, each parsed patch and
the cover letter, if there is one.

The one place that knows the directory's layout. Not for applying anything.
"""

from dataclasses import dataclass
from pathlib import Path

from series.cover import COVER_NAME, CoverError, parse_cover
from series.errors import SeriesError
from series.patchfile import PatchFormatError, parse_patch
from series.pins import parse_base, parse_series

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCHES_DIR = REPO_ROOT / "patches"
# Files the series adds under this prefix must equal the project's copy byte for byte.
MIRRORED_PREFIX = "test/registered/"


@dataclass(frozen=True)
class SeriesDir:
    root: Path  # the patches/ directory
    names: tuple
    base: object  # pins.Base
    patches: tuple  # patchfile.Patch, in series order
    cover: object = None  # cover.Cover, or None when there is no cover letter

    @property
    def project_root(self) -> Path:
        return self.root.parent

    def paths(self):
        return [self.root / name for name in self.names]

    def touched_files(self):
        """Every upstream path the series touches, first-touch order, with 'added' flags."""
        seen = {}
        for patch in self.patches:
            for diff in patch.files:
                seen.setdefault(diff.path, diff.new_file)
        return seen


def load(root=PATCHES_DIR) -> SeriesDir:
    root = Path(root)
    series_file, base_file = root / "series", root / "BASE"
    for required in (series_file, base_file):
        if not required.is_file():
            raise SeriesError(f"{required} is missing; run 'python -m series refresh'", 2)
    names = parse_series(series_file.read_text(), str(series_file))
    if not names:
        raise SeriesError(f"{series_file} lists no patches")
    base = parse_base(base_file.read_text(), str(base_file))
    patches = []
    for name in names:
        path = root / name
        if not path.is_file():
            raise SeriesError(f"{series_file} lists {name}, but {path} does not exist")
        try:
            patches.append(parse_patch(path.read_bytes(), name))
        except PatchFormatError as err:
            raise SeriesError(f"corrupt patch: {err}") from None
    cover_file = root / COVER_NAME
    letter = None
    if cover_file.is_file():
        try:
            letter = parse_cover(cover_file.read_bytes(), COVER_NAME)
        except (CoverError, UnicodeDecodeError) as err:
            raise SeriesError(f"corrupt cover letter: {err}") from None
        if letter.count != len(names):
            raise SeriesError(
                f"{COVER_NAME} introduces {letter.count} patches, {series_file} lists "
                f"{len(names)}; run 'python -m series refresh'"
            )
    return SeriesDir(root, tuple(names), base, tuple(patches), letter)
