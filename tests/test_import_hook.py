"""The start-up hook in fresh interpreters of a venv with the wheel installed, on the stand-in."""

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import standin
from conftest import clean_env
from overlay_envs import VERSIONS, build_wheel, clone_env, find_interpreter, make_env

from sglang_overlay import FUSED_KV_PATCH_ID, PATCH_ID

WORKSPACE_MODULE = standin.WORKSPACE_MODULE
UNKNOWN_EDIT = ("        assert num_tokens > 0\n", "        assert num_tokens >= 1\n")
FUSED_KV_UNKNOWN_EDIT = (
    "        new_capacity = max(1, total_ctx)\n",
    "        new_capacity = max(2, total_ctx)\n",
)
UNKNOWN = {"edit": UNKNOWN_EDIT, "fused_edit": FUSED_KV_UNKNOWN_EDIT}  # an unknown shape of each
# Each patch's guarantees are tested alike: (module, class, method, its record's index, id).
TARGETS = {
    "dsv4": (WORKSPACE_MODULE, "SparsePrefillKVBuffer", "_reserve", 0, PATCH_ID),
    "fused_kv": (standin.FUSED_KV_MODULE, "FusedKVMaterializeHelper", "_ensure_workspace", 1,
                 FUSED_KV_PATCH_ID),
}  # fmt: skip
RACE_RUNS = 10
RACING = ("dataclasses", "inspect", "ast")  # what activation imports, stdlib
# A bound against a hang (a deadlocked first import never finishes), not a measurement.
TIMEOUT_S = 120


@pytest.fixture(scope="session")
def overlay_envs(tmp_path_factory) -> dict:
    """Each declared Python's env this machine has, built at once, once per session."""
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    interpreters = {v: find_interpreter(v) for v in VERSIONS}
    roots = {v: tmp_path_factory.mktemp(f"venv{v}") for v, found in interpreters.items() if found}
    with ThreadPoolExecutor(max_workers=len(VERSIONS)) as pool:
        envs = pool.map(lambda v: make_env(interpreters[v], v, wheel, roots[v]), roots, timeout=600)
        return dict(zip(roots, envs, strict=True))


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"py{v}" for v in VERSIONS])
def overlay_env(request, overlay_envs):
    if request.param not in overlay_envs:
        pytest.skip(f"no Python {request.param} on this machine (pyenv or python{request.param})")
    return overlay_envs[request.param]


@pytest.fixture(scope="session")
def one_env(overlay_envs):
    """One declared Python, for what is the same on every CPython."""
    if not overlay_envs:
        pytest.skip("no declared Python on this machine (pyenv or python3.1x)")
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return overlay_envs.get(here) or next(iter(overlay_envs.values()))


@pytest.fixture(scope="session")
def known(tmp_path_factory) -> Path:
    """The stand-in with the real 0.5.23 class text: the overlay applies."""
    return standin.write(tmp_path_factory.mktemp("standin-known"))


def run(env, code: str, paths=(), flags=(), **variables):
    """``code`` in a fresh interpreter of ``env`` with the stand-in ``paths`` first on sys.path."""
    prelude = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n"
    return subprocess.run(
        [str(env.python), *flags, "-c", prelude + code], env=clean_env(**variables), cwd="/",
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip


def last_json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def overlay_warnings(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("sglang-overlay:")]


def for_each_target(template: str) -> str:
    """``template`` formatted for each target, its results in ``out[name]``, printed."""
    code = "import json, sglang_overlay\nout = {}\n"
    for name, (module, cls, method, index, _) in TARGETS.items():
        code += template.format(module=module, cls=cls, method=method, index=index, name=name)
    return code + "print(json.dumps(out))\n"


# Each target's mark and state, and whether its reason says SAYS (set before it).
REPORT = for_each_target("""
import {module} as m
r = sglang_overlay.status()[{index}]
out[{name!r}] = [getattr(vars(m.{cls})["{method}"], "__sglang_overlay_patch__", None),
                 r["state"], SAYS in r["reason"]]
""")
MARKS = [TARGETS[n][4] for n in TARGETS]


@pytest.mark.parametrize("edited", [False, True], ids=["known", "edited"])
def test_sglang_deployed_as_bytecode_only_is_recognised_by_its_code_objects(
    overlay_env, one_env, tmp_path, edited
):
    # compileall -b, sources removed: matched by this CPython's code objects, under -W error
    if edited and overlay_env is not one_env:
        pytest.skip("an unknown code object is refused alike on every Python")
    root = standin.write(tmp_path / "standin", **(UNKNOWN if edited else {}))
    subprocess.run(
        [str(overlay_env.python), "-m", "compileall", "-q", "-b", str(root / "sglang")], check=True
    )
    for source in (root / "sglang").rglob("*.py"):
        source.unlink()
    says = "not a known shape's" if edited else "bytecode only"
    out = last_json(run(overlay_env, f"SAYS = {says!r}\n" + REPORT, [root], flags=["-W", "error"]))
    for name, (*_, patch_id) in TARGETS.items():
        assert out[name] == ([None, "unsupported", True] if edited else [patch_id, "applied", True])


def test_threads_importing_what_activation_imports_never_deadlock_the_first_import(one_env, known):
    # a hook importing inside find_spec deadlocks against a thread importing the same module
    race = f"""
import threading, time
for racing in {RACING!r}:
    threading.Thread(target=__import__, args=(racing,), daemon=True).start()
time.sleep(0.001)
import sglang
""" + "".join(
        f"import {module} as m\nprint(getattr(m.{cls}.{method}, '__sglang_overlay_patch__', None))\n"
        for module, cls, method, _, _ in TARGETS.values()
    )
    with ThreadPoolExecutor(RACE_RUNS) as pool:  # a hung first import times out
        procs = list(pool.map(lambda _: run(one_env, race, [known]), range(RACE_RUNS)))
    assert [(p.returncode, p.stdout.split()) for p in procs] == [(0, MARKS)] * RACE_RUNS


PRELUDE = (
    f"import json\nMODULE = {WORKSPACE_MODULE!r}\n"
    "def MARK(m):\n"
    "    return getattr(m.SparsePrefillKVBuffer._reserve, '__sglang_overlay_patch__', None)\n"
)
RELOAD = """
import importlib
def mark():
    return getattr(vars(m.{cls})["{method}"], "__sglang_overlay_patch__", None)
def state():
    return sglang_overlay.status()[{index}]["state"]
import {module} as m
steps = [[mark(), state()]]
old_class = m.{cls}
importlib.reload(m)
steps.append([m.{cls} is not old_class, mark(), state()])
original = vars(m.{cls})["{method}"].__wrapped__
sglang_overlay.remove()
steps.append([mark(), state(), vars(m.{cls})["{method}"] is original])
importlib.reload(m)  # removed stays removed
steps.append([mark(), state()])
sglang_overlay.apply()
steps.append([mark(), state()])
out[{name!r}] = steps
"""
# a plugin's class put in the original's place by sglang's HookRegistry (a class REPLACE)
SUBCLASS_IN_PLACE = """
import {module} as m
class Vendor(m.{cls}):
    if OVERRIDES:
        def {method}(self, *args):
            pass
m.{cls} = Vendor
states = [sglang_overlay.status()[{index}]["state"], sglang_overlay.apply()[{index}]["state"]]
runs = getattr(Vendor.{method}, "__sglang_overlay_patch__", None)
states.append(sglang_overlay.remove()[{index}]["state"])
out[{name!r}] = [states, runs, getattr(Vendor.{method}, "__sglang_overlay_patch__", None)]
sglang_overlay.apply()  # for the next target
"""
CHILDREN = f"""
import logging, os, signal, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads running
inside, forked = threading.Event(), threading.Event()
class SlowHandler(logging.Handler):  # a log shipper that blocks for a moment
    def emit(self, record):
        if "applied" in record.getMessage():
            inside.set()
            forked.wait(10)
logging.getLogger("sglang_overlay").addHandler(SlowHandler())
logging.getLogger("sglang_overlay").setLevel(logging.INFO)
importer = threading.Thread(target=__import__, args=({WORKSPACE_MODULE!r},))
importer.start()
inside.wait(10)
pid = os.fork()
if pid == 0:  # what sglang's load_plugins() does in a child, then a status report
    signal.alarm(5)
    from sglang_overlay import activation, status
    activation.activate()
    os._exit(0 if status()[0]["state"] == "applied" else 3)
forked.set()
_, code = os.waitpid(pid, 0)
importer.join()
codes = [os.waitstatus_to_exitcode(code)]
# a child of each start method imports the module and exits 0 where it is patched
import multiprocessing as mp
check = ("import sys; m = __import__({WORKSPACE_MODULE!r}, fromlist=['x']); sys.exit(getattr("
         "m.SparsePrefillKVBuffer._reserve, '__sglang_overlay_patch__', None) != {PATCH_ID!r})")
for method in ("spawn", "forkserver"):
    child = mp.get_context(method).Process(target=exec, args=(check,))
    child.start()
    child.join(60)
    codes.append(child.exitcode)
print(json.dumps(codes))
"""
ID = object()  # the patch's id in RELOADED
RELOADED = [[ID, "applied"], [True, ID, "applied"], [None, "pending", True],  # the original back
            [None, "pending"], [ID, "applied"]]  # fmt: skip
# case -> (program, stand-in edits or None: no sglang, settings, flags, JSON, warnings)
PROGRAMS = {
    # before the first import nothing is imported; copied specs keep the wrapped loader
    "status, find_spec and a copied spec import nothing": ("""
import copy, importlib.util, pickle, sglang_overlay
r = sglang_overlay.status()[0]
version = [r["state"], r["sglang_version"], [m for m in ("sglang", "torch") if m in sys.modules]]
specs = [importlib.util.find_spec(n) for n in ("sglang", MODULE)]
copies = [copy.deepcopy(specs[1]), pickle.loads(pickle.dumps(specs[1]))]
print(json.dumps([version, [m for m in ("sglang_overlay.release_first", MODULE) if m in sys.modules],
                  [c.loader.get_filename(c.name).endswith("sparse_prefill_utils.py") for c in copies]]))
""", {}, {}, (), [["pending", "0.5.23", []], [], [True, True]], 0),
    # a neighbour that serves the module itself is asked, in order, and what it serves patched
    "a finder after the hook": ("""
import importlib.machinery
asked = []
class Neighbour:
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path.insert(1, Neighbour())
m = __import__(MODULE, fromlist=["x"])
print(json.dumps(["sglang" in asked, MODULE in asked, MARK(m), type(m.__loader__).__name__]))
""", {}, {}, (), [True, True, PATCH_ID, "SourceFileLoader"], 0),
    # warnings as errors never break the import of an unknown shape: one warning a patch
    "-W error, unknown shapes": ("SAYS = 'unknown source'\n" + REPORT, UNKNOWN, {}, ("-W", "error"),
                                 {t: [None, "unsupported", True] for t in TARGETS}, 2),
    "a failed activation keeps the import, says why and is retried": (f"""
import importlib
sys.modules["sglang_overlay.release_first"] = None  # activation's own import fails
import {WORKSPACE_MODULE} as m
import sglang_overlay
first = sglang_overlay.status()[0]
del sys.modules["sglang_overlay.release_first"]
importlib.reload(m)  # the next import attempt retries
print(json.dumps([first["state"], "release_first" in first["reason"],
                  sglang_overlay.status()[0]["state"], MARK(m)]))
""", {}, {}, ("-W", "error"), ["failed", True, "applied", PATCH_ID], 1),
    "a reload does not repeat a warning": (f"""
import importlib
import {WORKSPACE_MODULE} as m
importlib.reload(m)  # the same unrecognised setting is read again
print("{{}}")
""", {}, {"SGLANG_OVERLAY_DISABLE": "banana"}, (), {}, 1),
    "reload, remove and apply": (for_each_target(RELOAD), {}, {}, (),
                                 {t: [[p[-1] if s is ID else s for s in step] for step in RELOADED]
                                  for t, p in TARGETS.items()}, 0),
    "a subclass that inherits runs release-first": (
        "OVERRIDES = False\n" + for_each_target(SUBCLASS_IN_PLACE), {}, {}, (),
        {t: [["applied", "applied", "pending"], p[-1], None] for t, p in TARGETS.items()}, 0),
    "a subclass that overrides runs its own method": (
        "OVERRIDES = True\n" + for_each_target(SUBCLASS_IN_PLACE), {}, {}, (),
        {t: [["pending", "unsupported", "pending"], None, None] for t in TARGETS}, None),
    # sglang not installed: nothing to patch, and torch never imported
    "no sglang": ("""
import sglang_overlay
r = sglang_overlay.apply()[0]
print(json.dumps([r["state"], r["reason"], "torch" in sys.modules]))
""", None, {}, (), ["not-present", "sglang is not installed", False], 0),
    # a finder ahead of the hook served the module: unmodified sglang runs, not "waiting"
    "an import the hook never saw": ("""
import importlib, importlib.machinery, sglang_overlay
class Ahead:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path.insert(0, Ahead())
importlib.import_module(MODULE)
r = sglang_overlay.status()[0]
print(json.dumps([r["state"], "waiting" in r["reason"], "without the start-up hook" in r["reason"]]))
""", {}, {}, (), ["pending", False, True], 0),
    # sglang's load_plugins() calls the entry point: alone, it patches what is imported after it
    "sglang's plugin loader alone": ("""
import importlib
from importlib.metadata import entry_points
from sglang_overlay import activation
sys.meta_path.remove(activation.HOOK)
(plugin,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "sglang_overlay"]
plugin.load()()
print(json.dumps([MARK(importlib.import_module(MODULE)), activation.HOOK in sys.meta_path]))
""", {}, {}, (), [PATCH_ID, True], 0),
    # a fork while the overlay logs under its lock, then spawn and forkserver children
    "children forked while the overlay logs, spawned, forkserver's": (CHILDREN, {}, {},
                                                                      ("-I",), [0, 0, 0], 0),
}  # fmt: skip


@pytest.mark.parametrize("case", PROGRAMS)
def test_the_start_up_hook_patches_and_stays_out_of_the_import_systems_way(one_env, tmp_path, case):
    program, edits, variables, flags, expected, warnings = PROGRAMS[case]
    roots = [] if edits is None else [standin.write(tmp_path / "standin", **edits)]
    proc = run(one_env, PRELUDE + program, roots, flags, **variables)
    assert last_json(proc) == expected
    assert warnings is None or len(overlay_warnings(proc)) == warnings, proc.stderr


def cli(env, root, **variables):
    """``status --json`` in a fresh process: its records of the patches the stand-in carries."""
    code = "from sglang_overlay.cli import main; sys.exit(main(['status', '--json']))"
    proc = run(env, code, PYTHONPATH=str(root), **variables)
    return proc, [r for r in json.loads(proc.stdout) if r["patch"] in (PATCH_ID, FUSED_KV_PATCH_ID)]


def test_a_broken_install_is_named_and_a_stale_pth_is_silent(one_env, known, tmp_path):
    env = clone_env(one_env, tmp_path / "venv")
    pth = env.site_packages / "sglang_overlay.pth"
    text = pth.read_text()
    pth.unlink()  # a broken or partial install: status says so
    proc, records = cli(env, known)
    assert proc.returncode == 1 and [r["state"] for r in records] == ["pending", "pending"]
    assert all("start-up hook did not run in a fresh process" in r["reason"] for r in records)
    # an interrupted uninstall leaves the .pth: no Python start may print a traceback
    pth.write_text(text)
    shutil.rmtree(env.site_packages / "sglang_overlay")
    proc = run(env, "print('ok')", flags=["-W", "error"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")


FUSED = standin.FUSED_KV_MODULE.replace(".", "/") + ".py"
OLD_FUSED = "sglang.srt.speculative.triton_ops.fused_kv_materialize"  # before 0.5.16
ALLOCATION = "        self._proj_workspace = torch.empty(\n"
RELEASED = "".join(
    f"        self.{a} = None\n" for a in ("_proj_workspace", "_k_workspace", "_v_workspace")
)


def _prepend(text):
    return lambda root: (root / FUSED).write_text(text + (root / FUSED).read_text())


# case -> (stand-in options, change, settings, exit, [(state, named)] for 0001 and 0003)
CLI_CASES = {
    "0003 disabled": ({}, None, {"SGLANG_OVERLAY_DISABLE": "0003"}, 0,
                      [("applied", ""), ("disabled", "lists 0003")]),
    "no triton": ({}, _prepend("import triton_not_here  # noqa\n"), {}, 0,
                  [("applied", ""), ("not-present", "No module named 'triton_not_here'")]),
    "0.5.15 name": ({}, lambda root: (root / FUSED).rename(standin._module_file(root, OLD_FUSED)), {}, 0,
                    [("applied", ""), ("applied", "srt.speculative.triton_ops.fused_kv_materialize")]),
    "no helper": ({"fused": False}, None, {}, 0,
                  [("applied", ""), ("not-present", "has no sglang.kernels.ops.speculative.fused_kv_materialize or")]),
    "upstream fixed": ({"fused_edit": (ALLOCATION, RELEASED + ALLOCATION)}, None, {}, 0,
                       [("applied", ""), ("upstream-fixed", "already drops the old _proj_workspace, _k_workspace, _v_workspace")]),
    # triton and torch out of step: the module's own import raises (not ImportError)
    "import raises": ({}, _prepend('raise AttributeError("no attribute language")\n'), {}, 1,
                      [("applied", ""), ("failed", "AttributeError")]),
    # strict mode: the import of the module whose shape is unknown raises, that one only
    "strict, fused unknown": ({"fused_edit": FUSED_KV_UNKNOWN_EDIT}, None, {"SGLANG_OVERLAY_STRICT": "1"}, 1,
                              [("applied", ""), ("failed", "UnsupportedShapeError")]),
}  # fmt: skip


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_status_reports_each_patch_on_its_own(one_env, tmp_path, case):
    options, change, variables, code, expected = CLI_CASES[case]
    root = standin.write(tmp_path / "standin", **options)
    if change is not None:
        change(root)
    proc, records = cli(one_env, root, **variables)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert [r["state"] for r in records] == [state for state, _ in expected], records
    for record, (_, named) in zip(records, expected, strict=True):
        assert named in json.dumps(record), record
