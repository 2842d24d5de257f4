"""The registered regression test as a module: the one place the project imports it from.

The test file lives in upstream's layout (``test/registered/...``), outside any package, and
must run unchanged in an upstream checkout, so it cannot import this project; this module makes
it importable, once per process under one module name, and ci, benchmark and tests take its
harness from here: ``run_case`` (one case in this process under the allocator cap),
``launch_case`` (one case in a fresh capped interpreter), ``parse_result`` (a child's result
line), ``isolated_env``, and its read-only tables (``TRANSITIONS``, ``CHECKS``, the caps). It
also names which of the file's tests are regressions, from ``ci/regressions.txt``. The module is
loaded on first use of one of those names, since importing it imports sglang and torch. Not for
changing the test: its tables are read-only, and other sequences go to ``run_case`` as steps.
"""

import fnmatch
import importlib.util
import sys
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILE = "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py"
MODULE_NAME = "dsv4_sparse_prefill_workspace_registered"
API = (
    "ALLOCATOR_CAP_MIB",
    "CHECKS",
    "PEAK_LIMIT_MIB",
    "RESULT_PREFIX",
    "ROWS_64_MIB_BF16",
    "TRANSITIONS",
    "WORKSPACE_MODULE",
    "case_budgets",
    "isolated_env",
    "launch_case",
    "parse_result",
    "run_case",
)


def registered():
    """The registered test module, imported on first call and shared by every caller."""
    module = sys.modules.get(MODULE_NAME)
    if module is None:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, REPO / FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE_NAME] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[MODULE_NAME]
            raise
    return module


def __getattr__(name):
    if name in API:
        return getattr(registered(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def test_ids() -> list:
    """Every ``Class.test_name`` the file defines, in the loader's order."""
    module, loader = registered(), unittest.TestLoader()
    return [
        f"{cls.__name__}.{name}"
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, unittest.TestCase)
        for name in loader.getTestCaseNames(cls)
    ]


def regression_tests(patterns=None) -> set:
    """The file's test names that ``ci/regressions.txt`` (or ``patterns``) lists as regressions:
    the cases that must fail on unmodified sglang."""
    from ci.results import load_regression_patterns

    patterns = load_regression_patterns() if patterns is None else patterns
    return {
        case_id.split(".")[-1]
        for case_id in test_ids()
        if any(fnmatch.fnmatchcase(f"{FILE}::{case_id}", p) for p in patterns)
    }


def preservation_tests(patterns=None) -> set:
    """The file's other test names: behaviour the change must keep, passing both ways."""
    every = {case_id.split(".")[-1] for case_id in test_ids()}
    return every - regression_tests(patterns)
