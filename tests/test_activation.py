"""The overlay reaches every process that imports the workspace module, with no user code."""

from conftest import WORKSPACE_MODULE, run_json

from sglang_overlay import PATCH_ID

PATCHED_MARK = f"""
import json, sys
import {WORKSPACE_MODULE} as m
method = vars(m.SparsePrefillKVBuffer)["_reserve"]
print(json.dumps(getattr(method, "__sglang_overlay_patch__", None)))
"""


def test_plain_python_c_that_never_imports_the_overlay_gets_the_fix():
    assert run_json(PATCHED_MARK) == PATCH_ID


def test_multiprocessing_spawn_child_gets_the_fix():
    code = f"""
import json, multiprocessing as mp

def child(q):
    import {WORKSPACE_MODULE} as m
    q.put(getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start(); mark = q.get(timeout=240); p.join()
    print(json.dumps(mark))
"""
    import tempfile
    from pathlib import Path

    # spawn re-imports __main__ from a file, so the program must be one.
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "spawn_child.py"
        script.write_text(code)
        assert (
            run_json(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
            == PATCH_ID
        )


def test_interpreter_start_loads_only_the_hook_and_nothing_it_would_need_later():
    loaded = run_json(
        "import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.startswith("
        "('sglang', 'torch', 'wrapt')))))"
    )
    assert loaded == ["sglang_overlay", "sglang_overlay.import_hook"]


PLUGIN_LOADER_ONLY = """
import json, sys
import sglang_overlay.import_hook as hook
sys.meta_path.remove(hook.HOOK)  # only sglang's own plugin loader can activate us now
from sglang.srt.plugins import load_plugins
{body}
print(json.dumps([getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__",
                          None), hook.installed()]))
"""


def test_sglang_plugin_loader_alone_patches_a_module_imported_before_it():
    body = f"import {WORKSPACE_MODULE} as m\nload_plugins()"
    assert run_json(PLUGIN_LOADER_ONLY.format(body=body)) == [PATCH_ID, True]


def test_sglang_plugin_loader_alone_patches_a_module_imported_after_it():
    body = f"load_plugins()\nimport {WORKSPACE_MODULE} as m"
    assert run_json(PLUGIN_LOADER_ONLY.format(body=body)) == [PATCH_ID, True]


def test_second_activation_path_is_a_no_op():
    result = run_json(f"""
import json
import {WORKSPACE_MODULE} as m
from sglang.srt.plugins import load_plugins
first = vars(m.SparsePrefillKVBuffer)["_reserve"]
load_plugins()
import sglang_overlay
sglang_overlay.apply()
print(json.dumps([vars(m.SparsePrefillKVBuffer)["_reserve"] is first,
                  first.__wrapped__.__name__, sglang_overlay.status()[0]["state"]]))
""")
    assert result == [True, "_reserve", "applied"]
