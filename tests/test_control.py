"""Switches, refusals and bookkeeping: disable, strict, unknown shapes, apply/remove, status.

Observations on the real sglang class share one process per environment (``overlay_runs``):
the default one (unknown shape, upstream-fixed, apply/remove) and the disabled one; strict
mode, which must raise out of the process, has its own. What is only the overlay's logic
(a disable list, the CLI's fresh-process report) runs against the stand-in (``standin.py``).
"""

import json
import subprocess
import sys

import overlay_runs
import pytest
from conftest import WORKSPACE_MODULE, clean_env, run_json

from sglang_overlay import PATCH_ID

STATUS_KEYS = {"patch", "target", "sglang_version", "state", "reason"}

default_process = overlay_runs.fixture("default_process")
disabled_process = overlay_runs.fixture("disabled_process")


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return overlay_runs.standin_root(tmp_path_factory)


# Loads a real copy of the installed workspace module whose allocating method was edited
# (old -> new), under a name of its own, then runs the overlay on it twice. The class is
# sglang's, only its text differs.
LOAD_VARIANT = f"""
def load_variant(old, new, name):
    import importlib.util, os, tempfile
    import {WORKSPACE_MODULE} as real
    from sglang_overlay import overlay
    source = open(real.__file__).read()
    assert source.count(old) == 1, "edit anchor not found exactly once"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".py")
        with open(path, "w") as file:
            file.write(source.replace(old, new))
        spec = importlib.util.spec_from_file_location(name, path)
        variant = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(variant)
        for _ in range(2):  # while its source file exists: the overlay reads it
            overlay.apply_to_module(variant, overlay.PATCH_IDS[0])
    method = vars(variant.SparsePrefillKVBuffer)["_reserve"]
    return {{"status": overlay.status()[0],
             "patched": getattr(method, "__sglang_overlay_patch__", None)}}
"""

ALLOCATION = (
    "            self._buffer = torch.empty(\n                (num_tokens, 1, WORKSPACE_DIM),"
)
UNKNOWN = (
    "        assert num_tokens > 0\n        current_capacity",
    "        assert num_tokens >= 1\n        current_capacity",
)
RELEASED = (
    ALLOCATION,
    "            self._buffer = None\n            self._head_source = None\n" + ALLOCATION,
)


def _variant(name, edit) -> str:
    return LOAD_VARIANT + f"return load_variant({edit[0]!r}, {edit[1]!r}, {name!r})\n"


VARIANT_UNKNOWN = overlay_runs.observe(
    "default_process", "variant_unknown", _variant("workspace_variant_unknown", UNKNOWN)
)
VARIANT_FIXED = overlay_runs.observe(
    "default_process", "variant_fixed", _variant("workspace_variant_fixed", RELEASED)
)


def test_unknown_shape_is_left_untouched_with_one_warning_naming_version_and_reason(
    default_process,
):
    out = default_process.value(VARIANT_UNKNOWN)
    assert out["patched"] is None
    assert out["status"]["state"] == "unsupported"
    assert "unknown source of SparsePrefillKVBuffer._reserve" in out["status"]["reason"]
    warnings = default_process.overlay_warnings(VARIANT_UNKNOWN)
    assert len(warnings) == 1
    assert "sglang 0.5.23" in warnings[0] and "untouched" in warnings[0]


# Strict mode raises out of the import: a process of its own, which must fail.
overlay_runs.job("strict_variant_run")(
    lambda directory: overlay_runs.python(
        LOAD_VARIANT + f"\nload_variant({UNKNOWN[0]!r}, {UNKNOWN[1]!r}, 'workspace_variant')\n",
        SGLANG_OVERLAY_STRICT="1",
    )
)
strict_variant_run = overlay_runs.fixture("strict_variant_run")


def test_strict_mode_raises_instead_of_warning_on_an_unknown_shape(strict_variant_run):
    proc = strict_variant_run
    assert proc.returncode != 0
    assert "UnsupportedShapeError" in proc.stderr and "sglang 0.5.23" in proc.stderr


def test_source_that_already_releases_first_is_reported_upstream_fixed(default_process):
    out = default_process.value(VARIANT_FIXED)
    assert out["patched"] is None
    assert out["status"]["state"] == "upstream-fixed"
    assert default_process.overlay_warnings(VARIANT_FIXED) == []


DISABLE_ALL = overlay_runs.observe(
    "disabled_process",
    "disable_all",
    """
    import {WORKSPACE_MODULE} as m
    import sglang.kernels.ops.speculative.fused_kv_materialize as f
    import sglang_overlay
    return [[getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None),
             getattr(vars(f.FusedKVMaterializeHelper)["_ensure_workspace"],
                     "__sglang_overlay_patch__", None)],
            sglang_overlay.status()]
    """,
)


def test_disable_all_leaves_the_originals_and_reports_each_patch_disabled(disabled_process):
    marked, records = disabled_process.value(DISABLE_ALL)
    assert marked == [None, None]
    # the DFlash worker and the DSA/DSV4 backends are never imported here: disabled all the same
    assert [r["state"] for r in records] == ["disabled"] * 6
    assert all(set(r) == STATUS_KEYS for r in records)


def test_disable_list_naming_this_patch_turns_it_off(known):
    code = "import json, sglang_overlay; print(json.dumps(sglang_overlay.apply()[0]['state']))"
    prelude = overlay_runs.standin_prelude(known)
    assert run_json(prelude + code, SGLANG_OVERLAY_DISABLE=f" {PATCH_ID} ") == "disabled"


APPLY_REMOVE = overlay_runs.observe(
    "default_process",
    "apply_remove",
    """
    import hashlib, inspect
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
    return [same_after_apply, removed, restored, reapplied,
            getattr(vars(cls)["_reserve"], "__sglang_overlay_patch__", None)]
    """,
)


def test_apply_twice_is_a_no_op_and_remove_restores_the_exact_original(default_process):
    assert default_process.value(APPLY_REMOVE) == [True, "pending", True, "applied", PATCH_ID]


def test_status_before_the_workspace_module_is_imported_is_pending():
    records = run_json("import json, sglang_overlay; print(json.dumps(sglang_overlay.status()))")
    assert records[0]["state"] == "pending" and set(records[0]) == STATUS_KEYS


def test_cli_status_json_reports_applied_and_exits_zero(known):
    # The CLI's fresh process imports the stand-in (first on PYTHONPATH), as it would sglang.
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--json"],
        env=clean_env(PYTHONPATH=str(known)),
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
        timeout=60,
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
