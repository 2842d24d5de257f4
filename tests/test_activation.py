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


def test_interpreter_start_imports_neither_torch_nor_sglang_nor_wrapt():
    loaded = run_json(
        "import json, sys; print(json.dumps({m: m in sys.modules for m in "
        "('sglang_overlay._startup', 'torch', 'sglang', 'wrapt', 'sglang_overlay.overlay')}))"
    )
    assert loaded == {
        "sglang_overlay._startup": True,  # the .pth ran
        "torch": False,
        "sglang": False,
        "wrapt": False,
        "sglang_overlay.overlay": False,
    }


def test_sglang_plugin_loader_alone_activates_the_overlay():
    # Take the start-up trigger out first, so only sglang's own plugin loader can activate us.
    mark = run_json(f"""
import json, sys
import sglang_overlay._startup as startup
startup._uninstall()
from sglang.srt.plugins import load_plugins
from sglang_overlay import activation
assert not activation._activated, "the start-up trigger ran although it was removed"
load_plugins()
import {WORKSPACE_MODULE} as m
print(json.dumps([activation._activated,
                  getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None)]))
""")
    assert mark == [True, PATCH_ID]


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
