"""The registered regression test proves the bug: it fails on unmodified sglang.

With the overlay on, pytest runs the registered file itself (it is collected from
test/registered/). Here the same file runs as upstream's runner runs it, ``python FILE -v``,
with ``SGLANG_OVERLAY_DISABLE=1``: the three transitions and the peak case must fail with the
allocator's out-of-memory error, and the preservation cases must still pass. Every CPU case runs
in a child forked after one import of the workspace module, so the file imports it once.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REGISTERED_TEST, REPO, clean_env

from ci import harness
from ci.results import load_regression_patterns

# The one regression list is ci/regressions.txt; every other test of the file preserves behaviour.
REGRESSION_CASES = harness.regression_tests()
PRESERVATION_CASES = harness.preservation_tests()


# Started with this on its path, every Python process (subprocess children too, not forked
# ones: they never start) notes its pid when it imports torch, the heavy part of the case.
_NOTE_TORCH_IMPORT = """
import os, sys

def _note(event, args):
    if event == "import" and args[0] == "torch":
        with open(os.environ["TORCH_IMPORT_LOG"], "a") as log:
            log.write(f"{os.getpid()}\\n")

sys.addaudithook(_note)
"""


def test_unmodified_sglang_fails_the_transitions_with_out_of_memory_on_cpu_after_one_import(
    tmp_path,
):
    (tmp_path / "sitecustomize.py").write_text(_NOTE_TORCH_IMPORT)
    imports = tmp_path / "torch-imports.log"
    proc = subprocess.run(
        [sys.executable, str(REGISTERED_TEST), "-v", "TestSparsePrefillWorkspaceCPU"],
        env=clean_env(
            SGLANG_OVERLAY_DISABLE="1", PYTHONPATH=str(tmp_path), TORCH_IMPORT_LOG=str(imports)
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    outcomes = dict(
        re.findall(r"^(test_\w+) \(.*?\) \.\.\. (?:.*\n)*?(ok|FAIL|ERROR)$", proc.stderr, re.M)
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert {name for name, o in outcomes.items() if o == "FAIL"} == REGRESSION_CASES
    assert {name for name, o in outcomes.items() if o == "ok"} == PRESERVATION_CASES
    assert proc.stderr.count("DefaultCPUAllocator: can't allocate memory") >= len(REGRESSION_CASES)
    importers = set(imports.read_text().split())
    assert len(importers) == 1, f"{len(importers)} processes imported torch; one should"


def _loads_the_registered_file(text: str) -> bool:
    """A ``spec_from_file_location(...)`` call whose arguments name the registered file."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            "spec_from_file_location"
        ):
            arguments = " ".join(ast.unparse(a) for a in node.args)
            if "test_dsv4_sparse_prefill_workspace" in arguments or "REGISTERED" in arguments:
                return True
    return False


def test_only_ci_harness_imports_the_registered_file_by_its_path():
    offenders = [
        str(path.relative_to(REPO))
        for folder in ("ci", "benchmark", "tests", "tools")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path not in (REPO / "ci/harness.py", Path(__file__).resolve())
        and _loads_the_registered_file(path.read_text())
    ]
    assert offenders == []
    # The check finds what it looks for: the harness's own load is one.
    assert _loads_the_registered_file(
        (REPO / "ci/harness.py").read_text().replace("FILE", "REGISTERED")
    )


def test_the_registered_tables_are_read_only_through_the_harness():
    with pytest.raises(TypeError):
        harness.TRANSITIONS["another_sequence"] = ((16384, "bfloat16"),)
    with pytest.raises(TypeError):
        harness.TRANSITIONS["grow_bf16_64_to_96_mib"][0] = (1, "bfloat16")
    assert harness.registered() is harness.registered()
    assert "another_sequence" not in harness.TRANSITIONS


def test_the_harness_parses_a_childs_result_line_and_nothing_else():
    line = harness.RESULT_PREFIX + json.dumps({"case": "c", "outcome": "oom"})
    assert harness.parse_result(f"noise\n{line}\nmore noise\n") == {"case": "c", "outcome": "oom"}
    assert harness.parse_result("DSV4 workspace case: no prefix here\n") is None


def test_every_line_of_the_regression_list_names_a_test_of_the_registered_file():
    for pattern in load_regression_patterns():
        assert harness.regression_tests([pattern]), f"{pattern} matches no registered test"
    assert len(REGRESSION_CASES) == 4 and len(PRESERVATION_CASES) == 3
    assert harness.regression_tests([]) == set()
