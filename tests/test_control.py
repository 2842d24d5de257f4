"""Switches, refusals and bookkeeping: disable, strict, unknown shapes, apply/remove, status."""

import json
import subprocess
import sys

from conftest import WORKSPACE_MODULE, clean_env, run_json, run_python

from sglang_overlay import PATCH_ID

STATUS_KEYS = {"patch", "target", "sglang_version", "state", "reason"}

# Loads a real copy of the installed workspace module whose allocating method was edited by
# EDIT (old, new), then runs the overlay on it. The class is sglang's, only its text differs.
VARIANT = f"""
import importlib.util, json, sys
import {WORKSPACE_MODULE} as real
old, new = json.loads(sys.argv[1])
source = open(real.__file__).read()
assert source.count(old) == 1, "edit anchor not found exactly once"
path = "/tmp/sglang_overlay_variant_%d.py" % __import__("os").getpid()
open(path, "w").write(source.replace(old, new))
spec = importlib.util.spec_from_file_location("workspace_variant", path)
variant = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variant)
from sglang_overlay import overlay
for _ in range(2):
    overlay.apply_to_module(variant)
marked = getattr(vars(variant.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None)
print(json.dumps({{"status": overlay.status()[0], "patched": marked}}))
"""

ALLOCATION = (
    "            self._buffer = torch.empty(\n                (num_tokens, 1, WORKSPACE_DIM),"
)


def _variant(old, new, **env):
    """The run, its last JSON line, and the overlay's WARNING lines (last-resort handler)."""
    proc = run_python(VARIANT, json.dumps([old, new]), **env)
    lines = proc.stdout.splitlines()
    out = json.loads(lines[-1]) if proc.returncode == 0 else None
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("sglang-overlay:")]
    return proc, out, warnings


def test_unknown_shape_is_left_untouched_with_one_warning_naming_version_and_reason():
    proc, out, warnings = _variant(
        "        assert num_tokens > 0\n        current_capacity",
        "        assert num_tokens >= 1\n        current_capacity",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out["patched"] is None
    assert out["status"]["state"] == "unsupported"
    assert "unknown source of SparsePrefillKVBuffer._reserve" in out["status"]["reason"]
    assert len(warnings) == 1
    assert "sglang 0.5.23" in warnings[0] and "untouched" in warnings[0]


def test_strict_mode_raises_instead_of_warning_on_an_unknown_shape():
    proc, _, _ = _variant(
        "        assert num_tokens > 0\n        current_capacity",
        "        assert num_tokens >= 1\n        current_capacity",
        SGLANG_OVERLAY_STRICT="1",
    )
    assert proc.returncode != 0
    assert "UnsupportedShapeError" in proc.stderr and "sglang 0.5.23" in proc.stderr


def test_source_that_already_releases_first_is_reported_upstream_fixed():
    released = (
        "            self._buffer = None\n            self._head_source = None\n" + ALLOCATION
    )
    _, out, warnings = _variant(ALLOCATION, released)
    assert out["patched"] is None
    assert out["status"]["state"] == "upstream-fixed"
    assert warnings == []


def test_disable_all_leaves_the_original_and_reports_disabled():
    out = run_json(
        f"""
import json
import {WORKSPACE_MODULE} as m
import sglang_overlay
print(json.dumps([getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None),
                  sglang_overlay.status()]))
""",
        SGLANG_OVERLAY_DISABLE="1",
    )
    marked, records = out
    assert marked is None
    assert [r["state"] for r in records] == ["disabled"]
    assert set(records[0]) == STATUS_KEYS


def test_disable_list_naming_this_patch_turns_it_off():
    code = "import json, sglang_overlay; print(json.dumps(sglang_overlay.apply()[0]['state']))"
    assert run_json(code, SGLANG_OVERLAY_DISABLE=f" {PATCH_ID} ") == "disabled"


def test_apply_twice_is_a_no_op_and_remove_restores_the_exact_original():
    out = run_json(f"""
import json, hashlib, inspect
import {WORKSPACE_MODULE} as m
import sglang_overlay
cls = m.SparsePrefillKVBuffer
patched = vars(cls)["_reserve"]
original = patched.__wrapped__
sglang_overlay.apply(); sglang_overlay.apply()
same_after_apply = vars(cls)["_reserve"] is patched
removed = sglang_overlay.remove()[0]["state"]
restored = vars(cls)["_reserve"] is original
text = hashlib.sha256(inspect.getsource(vars(cls)["_reserve"]).encode()).hexdigest()
reapplied = sglang_overlay.apply()[0]["state"]
print(json.dumps([same_after_apply, removed, restored, reapplied,
                  getattr(vars(cls)["_reserve"], "__sglang_overlay_patch__", None)]))
""")
    assert out == [True, "pending", True, "applied", PATCH_ID]


def test_status_before_the_workspace_module_is_imported_is_pending():
    records = run_json("import json, sglang_overlay; print(json.dumps(sglang_overlay.status()))")
    assert records[0]["state"] == "pending" and set(records[0]) == STATUS_KEYS


def test_cli_status_json_reports_applied_and_exits_zero():
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--json"],
        env=clean_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(proc.stdout)
    assert records[0]["patch"] == PATCH_ID and records[0]["state"] == "applied"
    assert records[0]["target"].endswith("SparsePrefillKVBuffer._reserve")


def test_cli_bad_usage_exits_two():
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "frobnicate"],
        env=clean_env(),
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2


def test_an_environment_without_sglang_reports_not_present(tmp_path):
    # The base interpreter, isolated, with only a copy of the overlay on its path: no sglang,
    # no torch. The overlay must say so instead of failing.
    import shutil
    from pathlib import Path

    import sglang_overlay

    shutil.copytree(Path(sglang_overlay.__file__).parent, tmp_path / "sglang_overlay")
    code = (
        f"import sys, json; sys.path.insert(0, {str(tmp_path)!r}); import sglang_overlay; "
        "print(json.dumps([sglang_overlay.apply(), 'torch' in sys.modules]))"
    )
    proc = subprocess.run(
        [sys._base_executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records, torch_loaded = json.loads(proc.stdout)
    assert (
        records[0]["state"] == "not-present" and records[0]["reason"] == "sglang is not installed"
    )
    assert not torch_loaded
