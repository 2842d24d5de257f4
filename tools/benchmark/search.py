"""Threshold searches over a monotone pass/fail probe, in whole units (MiB here): start at a
guess (what theory predicts), gallop outward until the threshold is bracketed, then bisect. The
answer never depends on the guess, only the number of probes (each a fresh process) does.
"""

from dataclasses import dataclass, field


@dataclass
class Threshold:
    """The result of one search: the value found (None when nothing in range passes)."""

    value: "int | None"
    probes: list = field(default_factory=list)  # (argument, passed) in the order tried
    at_bound: bool = False  # the value is the range's open end: the true one may lie beyond


def smallest_passing(passes, guess: int, floor: int, ceiling: int) -> Threshold:
    """Smallest ``b`` in ``(floor, ceiling]`` with ``passes(b)``, for ``passes`` false below a
    threshold and true from it on. ``floor`` itself is taken to fail without a probe."""
    probes = []

    def probe(b):
        ok = bool(passes(b))
        probes.append((b, ok))
        return ok

    guess = min(max(guess, floor + 1), ceiling)
    if probe(guess):
        hi, step, lo = guess, 1, floor
        while hi - step > floor:
            if not probe(hi - step):
                lo = hi - step
                break
            hi, step = hi - step, step * 2
    else:
        lo, step, hi = guess, 1, None
        while lo < ceiling:
            nxt = min(lo + step, ceiling)
            if probe(nxt):
                hi = nxt
                break
            lo, step = nxt, step * 2
        if hi is None:
            return Threshold(None, probes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    return Threshold(hi, probes, at_bound=hi == floor + 1)


def largest_passing(passes, guess: int, floor: int, ceiling: int) -> Threshold:
    """Largest ``s`` in ``[floor, ceiling)`` with ``passes(s)``, for ``passes`` true up to a
    threshold and false beyond it. ``ceiling`` itself is taken to fail without a probe."""
    mirrored = smallest_passing(lambda m: passes(-m), -guess, -ceiling, -floor)
    probes = [(-m, ok) for m, ok in mirrored.probes]
    value = None if mirrored.value is None else -mirrored.value
    return Threshold(value, probes, mirrored.at_bound)
