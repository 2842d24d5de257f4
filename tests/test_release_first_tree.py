"""The release-first method as this working tree builds it, on the stand-in torch."""

import json

import overlay_runs
import pytest
from conftest import REPO, run_python

# the working tree's overlay; at the allocation no buffer is held or reachable
PROGRAM = """
import gc, inspect, json, sys, weakref
for name in [m for m in sys.modules if m.split(".")[0] == "sglang_overlay"]:
    del sys.modules[name]
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "WorkspaceImportHook"]
sys.path[:0] = [REPO, STANDIN]
import torch
import sglang.srt.layers.attention.dsv4.sparse_prefill_utils as module
from sglang_overlay import release_first, shapes
assert release_first.__file__.startswith(REPO), release_first.__file__

seen = []

class Workspace:
    def __init__(self):
        self._buffer, self._head_source, self.old = None, "head", None

    @property
    def device(self):
        gc.collect()
        seen.append({"owner_holds_none": self._buffer is None,
                     "old_released": self.old is None or self.old() is None,
                     "head_forgotten": self._head_source is None})
        return "cpu"

found = shapes.recognise(module)
assert found.state == "recognised", found
original = vars(found.cls)[found.method]
built = release_first.build(shapes.DSV4, found, module, publish=lambda: None)
workspace = Workspace()
built(workspace, 64, torch.bfloat16)  # the first: nothing to release
workspace.old = weakref.ref(workspace._buffer)
seen.clear()
built(workspace, 128, torch.bfloat16)  # grows: the 64-row buffer must go first
parameters = [
    [[p.name, str(p.kind), repr(p.default)] for p in inspect.signature(f, follow_wrapped=False).parameters.values()]
    for f in (built, original)
]
print(json.dumps({"seen": seen, "parameters": parameters}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = overlay_runs.standin_root(tmp_path_factory)
    program = PROGRAM.replace("REPO", repr(str(REPO))).replace("STANDIN", repr(str(root)))
    proc = run_python(program)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_old_buffer_is_released_before_the_new_one_is_allocated(built):
    released = {"owner_holds_none": True, "old_released": True, "head_forgotten": True}
    assert built["seen"] and all(read == released for read in built["seen"]), built["seen"]


def test_the_built_method_has_the_parameters_of_the_method_it_replaces(built):
    # follow_wrapped=False: the patched function's own parameters
    ours, original = built["parameters"]
    assert ours == original
