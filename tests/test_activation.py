"""The overlay reaches every process that imports the workspace module, with no user code.

The start-up state, the plain first import and the second activation path are observations of
the shared default process (``overlay_runs``). The spawn child and each order of sglang's plugin
loader and the first import are first imports of their own: each gets a fresh process, started
early and side by side with the rest.
"""

import overlay_runs
from conftest import WORKSPACE_MODULE

from sglang_overlay import PATCH_ID

default_process = overlay_runs.fixture("default_process")

START_MODULES = overlay_runs.observe(
    "default_process",
    "start_modules",
    """
    return sorted(m for m in sys.modules if m.startswith(("sglang", "torch", "wrapt")))
    """,
)

# The program's first statement that touches sglang: nothing of the user's imported the overlay.
FIRST_IMPORT = overlay_runs.observe(
    "default_process",
    "first_import",
    """
    import {WORKSPACE_MODULE} as m
    return getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None)
    """,
)

SECOND_ACTIVATION = overlay_runs.observe(
    "default_process",
    "second_activation",
    """
    import {WORKSPACE_MODULE} as m
    from sglang.srt.plugins import load_plugins
    first = vars(m.SparsePrefillKVBuffer)["_reserve"]
    load_plugins()
    import sglang_overlay
    sglang_overlay.apply()
    return [vars(m.SparsePrefillKVBuffer)["_reserve"] is first,
            first.__wrapped__.__name__, sglang_overlay.status()[0]["state"]]
    """,
)


def test_plain_python_c_that_never_imports_the_overlay_gets_the_fix(default_process):
    assert default_process.value(FIRST_IMPORT) == PATCH_ID


def test_interpreter_start_loads_only_the_hook_and_nothing_it_would_need_later(default_process):
    assert default_process.value(START_MODULES) == ["sglang_overlay", "sglang_overlay.activation"]


def test_second_activation_path_is_a_no_op(default_process):
    assert default_process.value(SECOND_ACTIVATION) == [True, "_reserve", "applied"]


# ----------------------------------------------------------- processes of their own (jobs)

SPAWN = f"""
import json, multiprocessing as mp

def child(q):
    import {WORKSPACE_MODULE} as m
    q.put(getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start(); mark = q.get(timeout=240); p.join(timeout=240)
    print(json.dumps(mark))
"""


@overlay_runs.job("spawn_child_run")
def _spawn_child(directory):
    # spawn re-imports __main__ from a file, so the program must be one.
    script = directory / "spawn_child.py"
    script.write_text(SPAWN)
    return overlay_runs.python(
        f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    )


spawn_child_run = overlay_runs.fixture("spawn_child_run")


def test_multiprocessing_spawn_child_gets_the_fix(spawn_child_run):
    assert overlay_runs.last_json(spawn_child_run) == PATCH_ID


PLUGIN_LOADER_ONLY = """
import json, sys
import sglang_overlay.activation as hook
sys.meta_path.remove(hook.HOOK)  # only sglang's own plugin loader can activate us now
from sglang.srt.plugins import load_plugins
{body}
print(json.dumps([getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__",
                          None), hook.installed()]))
"""

# Two orders, two first imports: each needs a fresh process. The second is the first
# observation of a shared process (another vendor's hook is checked in it after).
overlay_runs.job("plugin_loader_before_run")(
    lambda directory: overlay_runs.python(
        PLUGIN_LOADER_ONLY.format(body=f"import {WORKSPACE_MODULE} as m\nload_plugins()")
    )
)
plugin_loader_before_run = overlay_runs.fixture("plugin_loader_before_run")
plugin_loader_after_process = overlay_runs.fixture("plugin_loader_after_process")
PLUGIN_LOADER_AFTER = overlay_runs.observe(
    "plugin_loader_after_process",
    "plugin_loader_after",
    """
    import sglang_overlay.activation as hook
    sys.meta_path.remove(hook.HOOK)  # only sglang's own plugin loader can activate us now
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import {WORKSPACE_MODULE} as m
    return [getattr(vars(m.SparsePrefillKVBuffer)["_reserve"], "__sglang_overlay_patch__", None),
            hook.installed()]
    """,
)


def test_sglang_plugin_loader_alone_patches_a_module_imported_before_it(plugin_loader_before_run):
    assert overlay_runs.last_json(plugin_loader_before_run) == [PATCH_ID, True]


def test_sglang_plugin_loader_alone_patches_a_module_imported_after_it(
    plugin_loader_after_process,
):
    assert plugin_loader_after_process.value(PLUGIN_LOADER_AFTER) == [PATCH_ID, True]
