"""The vocabulary of the mutants table: a fix of the series, its named mutants, and the
backends its registered tests run on. Data types only (``fixes``, ``q8kv8_fixes``: the rows).
"""

from dataclasses import dataclass, field

BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    edits: tuple  # (old, new) substitutions on the fixed file, each matching once
    killed_by: dict = field(default_factory=dict)  # backend -> the tests that must kill it


@dataclass(frozen=True)
class Fix:
    patch: str
    source: str  # upstream path of the file the fix changes
    module: str
    tests: dict  # backend -> registered test files
    unmodified_killed_by: dict
    mutants: tuple
    preserved_by: tuple = ()  # preservation tests: pass on every variant
    base_file: str = ""  # the base's text in this repository (a cut's), else the installed file
    pins: str = "patches/BASE"  # the BASE that pins it
