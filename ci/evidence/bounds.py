"""Bounded checks of loaded JSON, field by field: each takes (value, where, *args) and returns
the value as the model holds it, or raises ``EvidenceError`` naming the field. Generic: the
model (``ci.evidence.model``) says which check each of its fields passes through.
"""

import functools
import math
from dataclasses import MISSING, field, fields

from ci.errors import CiError


class EvidenceError(CiError, ValueError):
    """Evidence that is not what the runner writes; the message names the field."""


def checked(check, *args, nullable=False, required=None, **kwargs):
    """A dataclass field that loading passes through ``check(value, where, *args)``; required
    unless it has a default, and None passes unchecked where ``nullable`` or the default."""
    if required is None:
        required = "default" not in kwargs and "default_factory" not in kwargs
    nullable = nullable or kwargs.get("default", MISSING) is None
    metadata = {"check": (check, args), "nullable": nullable, "required": required}
    return field(metadata=metadata, **kwargs)


def text(value, where, limit) -> str:
    if not isinstance(value, str):
        raise EvidenceError(f"{where}: expected text, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} characters; at most {limit}")
    return value


def matching(value, where, pattern, what) -> str:
    if not (isinstance(value, str) and pattern.fullmatch(value)):
        raise EvidenceError(f"{where}: {str(value)[:80]!r} is not {what}")
    return value


def one_of(value, where, choices):
    """The one of ``choices`` (strings, or a str enum's members) ``value`` is."""
    for choice in choices:
        if value == choice:
            return choice
    raise EvidenceError(f"{where}: {str(value)[:40]!r} is not one of {', '.join(choices)}")


def integer_in(value, where, low, high) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise EvidenceError(f"{where}: expected an integer from {low} to {high}")
    return value


def number(value, where, limit) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= limit:
        raise EvidenceError(f"{where}: expected a number from 0 to {limit}")
    return float(value)


def flag(value, where) -> bool:
    if not isinstance(value, bool):
        raise EvidenceError(f"{where}: expected true or false")
    return value


def list_of(value, where, limit, check, *args) -> tuple:
    if not isinstance(value, list):
        raise EvidenceError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise EvidenceError(f"{where}: {len(value)} items; at most {limit}")
    return tuple(check(item, f"{where}[{i}]", *args) for i, item in enumerate(value))


@functools.cache
def checked_fields(cls) -> tuple[tuple, frozenset]:
    checks = tuple(f for f in fields(cls) if "check" in f.metadata)
    return checks, frozenset(f.name for f in checks)


def load_object(data, where: str, cls):
    """A ``cls`` from JSON ``data``, every field checked; any other key is refused."""
    if not isinstance(data, dict):
        raise EvidenceError(f"{where}: expected an object, got {type(data).__name__}")
    checks, names = checked_fields(cls)
    missing = [f.name for f in checks if f.metadata["required"] and f.name not in data]
    if missing:
        raise EvidenceError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise EvidenceError(f"{where}: unknown field {str(unknown[0])[:40]!r}")
    values = {}
    for f in checks:
        if f.name not in data:
            continue
        value = data[f.name]
        if value is not None or not f.metadata["nullable"]:
            check, args = f.metadata["check"]
            value = check(value, f"{where}.{f.name}", *args)
        values[f.name] = value
    return cls(**values)


def nesting(value) -> int:
    """How many lists and objects deep ``value`` goes (without recursing itself)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in value)
    return deepest
