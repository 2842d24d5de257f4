"""When and how long to wait before retrying a GitHub API call.

For the retry policy only: which failures are worth another try (5xx, 429, 403 secondary rate
limits, dropped connections), how long to wait (Retry-After when GitHub says, exponential
backoff otherwise) and how many tries. ``sleep`` is injected so tests never wait for real.
"""

import random
import time
from dataclasses import dataclass, field

import github3.exceptions as gh_errors

MAX_WAIT_S = 300.0


class GaveUp(RuntimeError):
    """The call kept failing in a retryable way; the last error is chained."""


@dataclass
class RetryPolicy:
    attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0
    sleep: object = None  # None: time.sleep, looked up at call time so tests can stub it
    waits: list = field(default_factory=list)  # what we slept, for logs and tests

    def pause(self, seconds: float) -> None:
        (self.sleep or time.sleep)(seconds)

    def call(self, what: str, fn, *args, **kwargs):
        for attempt in range(1, self.attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                wait = retry_after(exc, attempt, self.base_s, self.cap_s)
                if wait is None:
                    raise
                if attempt == self.attempts:
                    raise GaveUp(f"{what}: gave up after {attempt} attempts: {exc}") from exc
                self.waits.append(wait)
                self.pause(wait)
        raise AssertionError("unreachable")


def retry_after(exc: Exception, attempt: int, base_s: float = 1.0, cap_s: float = 60.0):
    """Seconds to wait before the next try, or None when the error is not worth retrying."""
    backoff = min(cap_s, base_s * 2 ** (attempt - 1)) * (1 + random.random() * 0.25)
    if isinstance(exc, gh_errors.ConnectionError):
        return backoff
    if not isinstance(exc, gh_errors.GitHubError):
        return None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    code = exc.code
    told = _header_wait(headers)
    if code == 429 or (code == 403 and _is_rate_limit(exc, headers)):
        return told if told is not None else max(backoff, 60.0 if code == 403 else backoff)
    if 500 <= code < 600:
        return told if told is not None else backoff
    return None


def _header_wait(headers) -> float | None:
    value = headers.get("Retry-After")
    if value is not None:
        try:
            return min(MAX_WAIT_S, max(0.0, float(value)))
        except ValueError:
            return None
    # A primary rate limit says when it resets instead.
    if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
        try:
            return min(MAX_WAIT_S, max(0.0, float(headers["X-RateLimit-Reset"]) - time.time()))
        except ValueError:
            return None
    return None


def _is_rate_limit(exc, headers) -> bool:
    if "Retry-After" in headers or headers.get("X-RateLimit-Remaining") == "0":
        return True
    return "rate limit" in str(getattr(exc, "msg", "") or exc).lower()
