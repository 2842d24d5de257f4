"""How many times a test's method ran, counted from the method's side, for
``ci/runner/file_process.py`` (which loads this file by its path: the PR's process imports no
package of this project). While a test runs, its instance holds a counting wrapper in place of
the method, which ``TestCase.run`` finds and hands to ``_callTestMethod``, so a retry is seen
whichever way the call is made: ``TestCase``'s, ``IsolatedAsyncioTestCase``'s (which never calls
``TestCase``'s), sglang's ``CustomTestCase`` retry over either, or a file's own
``_callTestMethod``. A pass with no call seen (a run around every hook) is marked unobserved:
``ci.evidence`` never calls it proven.
"""

import functools
import inspect
import unittest
from traceback import format_exception


def unittest_id(test) -> str:
    """``Class.test_name``; ``Class.setUpClass`` (or the module's name) for a fixture."""
    method = getattr(test, "_testMethodName", None)
    if method is not None:
        return f"{type(test).__name__}.{method}"
    fixture, _, where = str(test).partition(" (")
    where = where.rstrip(")")
    class_fixture = fixture in ("setUpClass", "tearDownClass")
    return f"{where.split('.')[-1]}.{fixture}" if class_fixture else str(test)


class Attempts:
    """Each call of each test's method, in one process (the module's docstring says how)."""

    def __init__(self):
        self.calls: dict = {}  # test id -> [(outcome, detail)] per call; there once its run began

    def end(self, test_id: str):
        """The calls of a test whose run has ended; None where ``run`` never saw it start."""
        return self.calls.pop(test_id, None)

    def hook_run(self) -> None:
        run = unittest.case.TestCase.run

        def counted_run(test, result=None):
            name = getattr(test, "_testMethodName", None)
            try:
                method = getattr(test, name) if isinstance(name, str) else None
            except Exception:  # no such method: ``run`` says so itself
                method = None
            if method is None:
                return run(test, result)
            own = test.__dict__.get(name, _ABSENT)  # pytest sets the method on the instance
            calls = self.calls[unittest_id(test)] = []
            setattr(test, name, _counting(method, calls, test.failureException))
            try:
                return run(test, result)
            finally:
                if own is _ABSENT:
                    test.__dict__.pop(name, None)
                else:
                    test.__dict__[name] = own

        unittest.case.TestCase.run = counted_run


_ABSENT = object()


def _counting(method, calls: list, failure=AssertionError):
    """``method`` (a test's method, as its run finds it), appending each call's outcome to
    ``calls`` (``failure``: the test's failureException); a coroutine function stays one, so
    an asyncio test case still awaits it."""

    def failed(exc):
        outcome = "fail" if isinstance(exc, failure) else "error"
        calls.append((outcome, "".join(format_exception(exc))))

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def attempt(*args, **kwargs):
            try:
                value = await method(*args, **kwargs)
            except unittest.SkipTest:
                raise
            except BaseException as exc:
                failed(exc)
                raise
            calls.append(("pass", ""))
            return value

    else:

        @functools.wraps(method)
        def attempt(*args, **kwargs):
            try:
                value = method(*args, **kwargs)
            except unittest.SkipTest:
                raise
            except BaseException as exc:
                failed(exc)
                raise
            calls.append(("pass", ""))
            return value

    return attempt


UNOBSERVED = (
    "passed, but the runner saw no call of its method (it ran outside TestCase.run, or through "
    "something other than the method the run hands on): a retry there would be invisible"
)


def retried(outcome: str, detail: str, calls) -> tuple[str, list, bool]:
    """A finished test's detail, its attempts and whether they went unobserved, from its
    ``calls`` (None: its run was never seen)."""
    unobserved = outcome == "pass" and not calls
    if unobserved:
        return UNOBSERVED, [], True
    failures = [(n, d) for n, (o, d) in enumerate(calls or (), 1) if o != "pass"]
    if outcome == "pass" and failures and calls[-1][0] == "pass":  # not an expected failure
        number, first = failures[0]
        detail = f"attempt {number} of {len(calls)} failed, the last passed:\n{first}"
    return detail, [o for o, _ in calls or ()], False
