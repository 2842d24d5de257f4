"""One test's result in one process: the record every stage reads and writes.

The registered test writes one JSON object per finished test on its result channel (the file
descriptor given as ``--result-fd``); ``ci run`` reads them back here, judges them in
``results`` and stores them in results.json; ``ci report``, ``tools.series pr-body`` and the
benchmarks read that file. For the shape of the record and its validation only: it runs and
renders nothing. The dict form is driven by the dataclass fields, so adding a field is one line,
and a record is validated once, when it is loaded; a bad line is data (an error string), not an
exception.
"""

import enum
import json
import types
import typing
from dataclasses import MISSING, dataclass, fields


class Outcome(enum.StrEnum):
    """What one test did in one mode."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    MISSING = "missing"  # the mode ran, the test never reported


class Kind(enum.StrEnum):
    """What a case proves, from its outcomes in both modes (``results`` decides)."""

    REGRESSION = "regression"
    PRESERVATION = "preservation"
    NOT_REPRODUCED = "not-reproduced"
    BROKEN = "broken"
    SKIPPED = "skipped"
    NO_BASELINE = "no-baseline"


class RecordError(ValueError):
    """A record that does not match its fields; the message names where and which field."""


@dataclass(frozen=True)
class CaseResult:
    """One line of the result channel: a unittest case as it ended in one process."""

    test: str  # "Class.test_name", or "Class.setUpClass" for a class that never ran its tests
    outcome: Outcome
    duration_s: float | None = None
    detail: str | None = None  # the skip reason, or the traceback of a failure or error
    evidence: tuple[dict, ...] = ()  # the harness's per-case records the test read

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data, where: str = "result") -> "CaseResult":
        return from_dict(cls, data, where)


# A record is an object of evidence objects of plain values; the channel is PR code's output,
# and a line nested hundreds deep parses yet breaks every recursive step after it (asdict, dump).
MAX_NESTING = 16


def read_channel(text: str) -> tuple[list[CaseResult], list[str]]:
    """The records on a result channel, in order, and one error per line that is not one."""
    records, errors = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"result line {number}"
        try:
            data = json.loads(line)
            if _nesting(data) > MAX_NESTING:
                raise RecordError(f"{where}: nested deeper than {MAX_NESTING} levels")
            records.append(CaseResult.from_dict(data, where))
        except ValueError as exc:  # json.JSONDecodeError and RecordError both are
            errors.append(f"{where}: {exc}"[:300])
        except RecursionError:  # "[[[[..." a few KB long: nested past the parser itself
            errors.append(f"{where}: nested deeper than the JSON parser allows")
    return records, errors


def _nesting(value) -> int:
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


# ---- the dict form, from the fields ----


def to_dict(record) -> dict:
    return {f.name: _plain(getattr(record, f.name)) for f in fields(record)}


def from_dict(cls, data, where: str):
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields(cls):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise RecordError(f"{where}: missing field {f.name!r}")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
    return cls(**values)


def member(enum_type, value, where: str):
    """``enum_type(value)``, or a RecordError that names ``where`` and the choices."""
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(m.value for m in enum_type)
        raise RecordError(f"{where}: {value!r} is not one of {choices}") from None


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _value(hint, value, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return member(hint, value, where)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, hint):
        raise RecordError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
    return value
