"""The start-up hook as an operator's process meets it: fresh interpreters of a venv with the
overlay installed from its wheel (``overlay_envs.py``) against the stand-in sglang
(``standin.py``). What depends on the import system runs on every declared Python
(``overlay_env``), the overlay's own bookkeeping, settings and CLI on one (``one_env``).
``SGLANG_OVERLAY_TEST_WHEEL=PATH`` runs them against another build of the overlay.
"""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import standin
from overlay_envs import VERSIONS, build_wheel, clone_env, find_interpreter, make_env

PATCH_ID = "0001-dsv4-sparse-prefill-release-first"
FUSED_KV_PATCH_ID = "0003-fused-kv-workspace-release-first"
WORKSPACE_MODULE = standin.WORKSPACE_MODULE
UNKNOWN_EDIT = ("        assert num_tokens > 0\n", "        assert num_tokens >= 1\n")
FUSED_KV_UNKNOWN_EDIT = (
    "        new_capacity = max(1, total_ctx)\n",
    "        new_capacity = max(2, total_ctx)\n",
)
# Each patch's guarantees are tested alike: (module, class, method, its record's index, id).
TARGETS = {
    "dsv4": (WORKSPACE_MODULE, "SparsePrefillKVBuffer", "_reserve", 0, PATCH_ID),
    "fused_kv": (
        standin.FUSED_KV_MODULE,
        "FusedKVMaterializeHelper",
        "_ensure_workspace",
        1,
        FUSED_KV_PATCH_ID,
    ),
}
both_patches = pytest.mark.parametrize("target", list(TARGETS))
RACE_RUNS = 10
RACING = ("dataclasses", "inspect", "ast")  # what activation imports, stdlib
# A bound against a hang (a deadlocked first import never finishes), not a measurement: wide
# enough for a loaded 2-core machine, where each of these processes takes a fraction of it.
TIMEOUT_S = 120


OTHER_WHEEL = os.environ.get("SGLANG_OVERLAY_TEST_WHEEL")


@pytest.fixture(scope="session")
def overlay_wheel(tmp_path_factory) -> Path:
    return Path(OTHER_WHEEL) if OTHER_WHEEL else build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def overlay_envs(overlay_wheel, tmp_path_factory) -> dict:
    """The environment of each declared Python this machine has, built once per session, all
    at once (each is mostly a pip install waiting on its own interpreter)."""
    interpreters = {v: find_interpreter(v) for v in VERSIONS}
    roots = {v: tmp_path_factory.mktemp(f"venv{v}") for v, found in interpreters.items() if found}
    with ThreadPoolExecutor(max_workers=len(VERSIONS)) as pool:
        building = {
            v: pool.submit(
                make_env, interpreters[v], v, overlay_wheel, root, deps=bool(OTHER_WHEEL)
            )
            for v, root in roots.items()
        }
        return {v: future.result(timeout=600) for v, future in building.items()}


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"py{v}" for v in VERSIONS])
def overlay_env(request, overlay_envs):
    if request.param not in overlay_envs:
        pytest.skip(f"no Python {request.param} on this machine (pyenv or python{request.param})")
    return overlay_envs[request.param]


@pytest.fixture(scope="session")
def one_env(overlay_envs):
    """One declared Python, for what does not depend on the import system (the overlay's own
    bookkeeping, settings and CLI): the same on every CPython, so one interpreter checks it."""
    if not overlay_envs:
        pytest.skip("no declared Python on this machine (pyenv or python3.1x)")
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return overlay_envs.get(here) or next(iter(overlay_envs.values()))


@pytest.fixture(scope="session")
def known(tmp_path_factory) -> Path:
    """The stand-in with the real 0.5.23 class text: the overlay applies."""
    return standin.write(tmp_path_factory.mktemp("standin-known"))


@pytest.fixture(scope="session")
def unknown(tmp_path_factory) -> Path:
    """The stand-in with one line of the method edited: an unknown shape."""
    return standin.write(
        tmp_path_factory.mktemp("standin-unknown"),
        edit=UNKNOWN_EDIT,
        fused_edit=FUSED_KV_UNKNOWN_EDIT,
    )


def run(env, code: str, paths=(), flags=(), timeout=TIMEOUT_S, **variables):
    """``code`` in a fresh interpreter of ``env`` with the stand-in ``paths`` first on sys.path."""
    prelude = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n"
    return subprocess.run(
        [str(env.python), *flags, "-c", prelude + code],
        env=environ(**variables),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def environ(**variables) -> dict:
    """This environment without the overlay's switches and Python's own, plus ``variables``."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_OVERLAY_", "PYTHON"))
        and k != "VIRTUAL_ENV"
        or k == "SGLANG_OVERLAY_RUNTIME_DIR"  # conftest's: the tests' records stay there
    }
    return {**kept, **variables}


def last_json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def overlay_warnings(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("sglang-overlay:")]


def report(targets=tuple(TARGETS)) -> str:
    """A program that imports each target's module and prints, by target, its method's mark
    and its record."""
    lines = ["import json, sys", "import sglang_overlay", "out = {}"]
    for name in targets:
        module, cls, method, index, _ = TARGETS[name]
        lines += [
            f"import {module} as m",
            f'out[{name!r}] = {{"patched": getattr(vars(m.{cls})["{method}"], '
            f'"__sglang_overlay_patch__", None), "status": sglang_overlay.status()[{index}]}}',
        ]
    return "\n".join(lines + ["print(json.dumps(out))"]) + "\n"


REPORT = report(["dsv4"])


def test_a_thread_importing_what_activation_imports_never_deadlocks_the_first_import(
    overlay_env, known
):
    # CPython holds its global import lock while a finder's find_spec runs. A hook that
    # imports there deadlocks against a thread that is importing the same module. Each module
    # activation imports is raced by a thread of its own, all in every process.
    imports = "".join(
        f"import {module} as m\nprint(getattr(m.{cls}.{method}, '__sglang_overlay_patch__', None))\n"
        for module, cls, method, _, _ in TARGETS.values()
    )
    race = f"""
import threading, time
for racing in {RACING!r}:
    threading.Thread(target=__import__, args=(racing,), daemon=True).start()
time.sleep(0.001)
import sglang
{imports}"""
    prelude = f"import sys; sys.path[:0] = [{str(known)!r}]\n"
    procs = [
        subprocess.Popen(
            [str(overlay_env.python), "-c", prelude + race],
            env=environ(),
            cwd="/",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACE_RUNS)
    ]
    hangs, outputs = 0, []
    deadline = time.monotonic() + TIMEOUT_S  # one bound for the whole batch
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outputs.append((proc.returncode, out.strip(), err[-500:]))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            hangs += 1
    assert hangs == 0, f"{hangs} of {RACE_RUNS} first imports hung"
    marks = "\n".join(t[4] for t in TARGETS.values())
    assert all(o[:2] == (0, marks) for o in outputs), outputs[:3]


def test_warnings_as_errors_never_break_the_import_of_an_unknown_shape(overlay_env, unknown):
    proc = run(overlay_env, report(), [unknown], flags=["-W", "error"])
    for out in last_json(proc).values():
        assert (out["patched"], out["status"]["state"]) == (None, "unsupported")
    warnings = overlay_warnings(proc)
    assert len(warnings) == len(TARGETS)
    assert all("left sglang 0.5.23 untouched" in w and "unknown source" in w for w in warnings)


FAIL_THEN_RETRY = f"""
import importlib, json
sys.modules["sglang_overlay.release_first"] = None  # activation's own import fails
import {WORKSPACE_MODULE} as m
import sglang_overlay
first = sglang_overlay.status()[0]
del sys.modules["sglang_overlay.release_first"]
importlib.reload(m)  # the next import attempt retries
again = sglang_overlay.status()[0]
print(json.dumps([first, again["state"],
                  getattr(m.SparsePrefillKVBuffer._reserve, "__sglang_overlay_patch__", None)]))
"""


def test_a_failed_activation_keeps_the_import_says_why_and_is_retried(one_env, known):
    proc = run(one_env, FAIL_THEN_RETRY, [known], flags=["-W", "error"])
    first, again, mark = last_json(proc)
    assert first["state"] == "failed" and "release_first" in first["reason"]
    assert (again, mark) == ("applied", PATCH_ID)
    (warning,) = overlay_warnings(proc)
    assert "left unpatched" in warning and "runs unmodified sglang" in warning


def test_an_unrecognised_strict_value_means_strict_with_one_warning(one_env, unknown):
    proc = run(one_env, REPORT, [unknown], SGLANG_OVERLAY_STRICT="maybe")
    assert proc.returncode != 0 and "UnsupportedShapeError" in proc.stderr
    (warning,) = overlay_warnings(proc)
    assert "SGLANG_OVERLAY_STRICT='maybe' not recognised" in warning


# Import-system cases, on every declared Python: (program, stand-in, expected JSON).
HOOK_CASES = {
    # find_spec only finds: it imports the parents (sglang), never the module, never the fix
    "find_spec activates nothing": (
        """
import importlib.util, json
specs = [importlib.util.find_spec(n) is not None for n in ("sglang", MODULE)]
print(json.dumps([specs, [m for m in ("sglang_overlay.release_first", MODULE) if m in sys.modules]]))
""",
        "known",
        [[True, True], []],
    ),
    # a neighbour that serves the module itself is asked, in order, and what it serves patched
    "a finder after the hook": (
        """
import importlib.machinery, json
asked = []
class Neighbour:
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path.insert(1, Neighbour())
m = __import__(MODULE, fromlist=["x"])
print(json.dumps(["sglang" in asked, MODULE in asked, MARK(m), type(m.__loader__).__name__]))
""",
        "known",
        [True, True, PATCH_ID, "SourceFileLoader"],
    ),
    # copy.deepcopy and pickle build the wrapped loader without calling __init__
    "a found spec copied and pickled": (
        """
import copy, importlib.util, json, pickle
spec = importlib.util.find_spec(MODULE)
copies = [copy.deepcopy(spec), pickle.loads(pickle.dumps(spec))]
print(json.dumps([c.loader.get_filename(c.name).endswith("sparse_prefill_utils.py") for c in copies]))
""",
        "known",
        [True, True],
    ),
    # Ctrl-C between marking the thread as searching and the try that unmarks it
    "a keyboard interrupt inside the hook": (
        """
import importlib, json
from sglang_overlay import activation
class InterruptOnce(set):
    fired = False
    def add(self, item):
        super().add(item)
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
activation.HOOK._searching = InterruptOnce()
try:
    importlib.import_module(MODULE)
    first = "imported"
except KeyboardInterrupt:
    first = "interrupted"
print(json.dumps([first, MARK(importlib.import_module(MODULE))]))
""",
        "known",
        ["interrupted", PATCH_ID],
    ),
}
# The overlay's own bookkeeping, on one declared Python: (program, stand-in, settings, JSON).
STATE_CASES = {
    "strict raises on every attempt": ("""
import importlib, json
errors = []
for _ in range(2):
    try:
        importlib.import_module(MODULE)
        errors.append(None)
    except Exception as exc:
        errors.append(type(exc).__name__)
print(json.dumps(errors))
""", "unknown", {"SGLANG_OVERLAY_STRICT": "1"}, ["UnsupportedShapeError"] * 2),
    "never applied for a class it no longer patches": ("""
import importlib, json, sglang_overlay
from sglang_overlay import activation
m = importlib.import_module(MODULE)
sys.meta_path[:] = [f for f in sys.meta_path if f is not activation.HOOK]  # the hook gone
importlib.reload(m)
r = sglang_overlay.status()[0]
print(json.dumps([r["state"], "no longer the patched function" in r["reason"]]))
""", "known", {}, ["pending", True]),
    "the version read without importing sglang or torch": ("""
import json, sglang_overlay
r = sglang_overlay.status()[0]
print(json.dumps([r["state"], r["sglang_version"], [m for m in ("sglang", "torch") if m in sys.modules]]))
""", "known", {}, ["pending", "0.5.23", []]),
    # a finder ahead of the hook served the module: unmodified sglang runs, not "waiting"
    "an import the hook never saw": ("""
import importlib, importlib.machinery, json, sglang_overlay
class Ahead:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path.insert(0, Ahead())
importlib.import_module(MODULE)
r = sglang_overlay.status()[0]
print(json.dumps([r["state"], "waiting" in r["reason"], "without the start-up hook" in r["reason"]]))
""", "known", {}, ["pending", False, True]),
    # sglang's load_plugins() calls the entry point: alone, it patches what is imported after it
    "sglang's plugin loader alone": ("""
import importlib, json
from importlib.metadata import entry_points
from sglang_overlay import activation
sys.meta_path.remove(activation.HOOK)
(plugin,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "sglang_overlay"]
plugin.load()()
print(json.dumps([MARK(importlib.import_module(MODULE)), activation.installed()]))
""", "known", {}, [PATCH_ID, True]),
}  # fmt: skip
PRELUDE = (
    f"MODULE = {WORKSPACE_MODULE!r}\n"
    "def MARK(m):\n"
    "    return getattr(m.SparsePrefillKVBuffer._reserve, '__sglang_overlay_patch__', None)\n"
)


@pytest.mark.parametrize("case", HOOK_CASES)
def test_the_start_up_hook_stays_out_of_the_import_systems_way(overlay_env, case, request):
    program, standin_name, expected = HOOK_CASES[case]
    root = request.getfixturevalue(standin_name)
    assert last_json(run(overlay_env, PRELUDE + program, [root])) == expected


@pytest.mark.parametrize("case", STATE_CASES)
def test_status_says_what_runs_in_this_process(one_env, case, request):
    program, standin_name, variables, expected = STATE_CASES[case]
    root = request.getfixturevalue(standin_name)
    assert last_json(run(one_env, PRELUDE + program, [root], **variables)) == expected


RELOAD = """
import importlib, json
import sglang_overlay
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


def test_first_import_is_patched_and_reload_remove_apply_keep_working(overlay_env, known):
    code = "out = {}\n" + "".join(
        RELOAD.format(module=module, cls=cls, method=method, index=index, name=name)
        for name, (module, cls, method, index, _) in TARGETS.items()
    )
    out = last_json(run(overlay_env, code + "print(json.dumps(out))\n", [known]))
    for name, (*_, patch_id) in TARGETS.items():
        assert out[name] == [
            [patch_id, "applied"],
            [True, patch_id, "applied"],
            [None, "pending", True],  # the exact original function back
            [None, "pending"],
            [patch_id, "applied"],
        ]


def test_isolated_mode_and_spawn_and_forkserver_children_are_patched(overlay_env, known, tmp_path):
    module, cls, method, _, patch_id = TARGETS["dsv4"]  # the same hook serves every module
    script = tmp_path / "children.py"
    script.write_text(f"""
import json, multiprocessing as mp, sys
sys.path.insert(0, {str(known)!r})

def child(q):
    import {module} as m
    q.put(getattr(m.{cls}.{method}, "__sglang_overlay_patch__", None))

if __name__ == "__main__":
    marks = []
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start(); marks.append(q.get(timeout=60)); p.join()
    print(json.dumps(marks))
""")
    proc = subprocess.run(
        [str(overlay_env.python), "-I", str(script)],
        env=environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert last_json(proc) == [patch_id, patch_id]


def cli(env, paths, **variables):
    pythonpath = os.pathsep.join(str(p) for p in paths)
    return run(
        env,
        "import sys; from sglang_overlay.cli import main; sys.exit(main(['status', '--json']))",
        PYTHONPATH=pythonpath,
        **variables,
    )


def records_of(proc) -> list:
    """The records ``status --json`` printed for the patches the stand-in carries: it has no
    DFlash worker and no DSA/DSV4 backend, so patches 0005, 0007, 0009 and 0011 are not-present
    there (tests/test_overlay_patch_guarantees.py proves them)."""
    records = json.loads(proc.stdout)
    absent = ("0005-", "0007-", "0009-", "0011-")
    return [r for r in records if not (r["patch"][:5] in absent and r["state"] == "not-present")]


def test_cli_status_says_so_when_the_start_up_hook_is_missing(one_env, known, tmp_path):
    broken = clone_env(one_env, tmp_path / "venv")
    (broken.site_packages / "sglang_overlay.pth").unlink()  # a broken or partial install
    proc = cli(broken, [known])
    records = records_of(proc)
    assert proc.returncode == 1 and [r["state"] for r in records][:2] == ["pending", "pending"]
    for record in records[:2]:
        assert "start-up hook did not run in a fresh process" in record["reason"]


FORK_WHILE_LOGGING = f"""
import json, logging, os, signal, threading, warnings
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
    print(json.dumps(status()[0]["state"]), flush=True)
    os._exit(0)
forked.set()
_, code = os.waitpid(pid, 0)
importer.join()
print(json.dumps(["child", os.waitstatus_to_exitcode(code)]))
"""


def test_a_child_forked_while_the_overlay_logs_can_still_use_it(one_env, known):
    # The overlay logs "applied" under its own lock; a thread that forks meanwhile must not
    # hand the child a lock that nobody will ever release.
    proc = run(one_env, FORK_WHILE_LOGGING, [known])
    assert last_json(proc) == ["child", 0], proc.stdout + proc.stderr[-2000:]
    assert '"applied"' in proc.stdout


def test_a_reload_of_the_module_does_not_repeat_a_warning(one_env, known):
    code = f"""
import importlib
import {WORKSPACE_MODULE} as m
importlib.reload(m)  # the same unrecognised setting is read again
print("{{}}")
"""
    proc = run(one_env, code, [known], SGLANG_OVERLAY_DISABLE="banana")
    assert last_json(proc) == {}
    assert len(overlay_warnings(proc)) == 1, proc.stderr


def test_a_stale_pth_whose_package_is_gone_is_silent(one_env, tmp_path):
    # An interrupted uninstall leaves sglang_overlay.pth behind; every Python start (pip
    # included) must not print a traceback for it.
    import shutil

    env = clone_env(one_env, tmp_path / "venv")
    assert (env.site_packages / "sglang_overlay.pth").exists()
    shutil.rmtree(env.site_packages / "sglang_overlay")
    proc = run(env, "print('ok')", flags=["-W", "error"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")


@pytest.mark.parametrize("edited", [False, True], ids=["known", "edited"])
def test_sglang_deployed_as_bytecode_only_is_recognised_by_its_code_objects(
    overlay_env, tmp_path, edited
):
    # compileall -b, then the sources removed: each method is matched by its code object.
    edits = {"edit": UNKNOWN_EDIT, "fused_edit": FUSED_KV_UNKNOWN_EDIT} if edited else {}
    root = standin.write(tmp_path / "standin", **edits)
    subprocess.run(
        [str(overlay_env.python), "-m", "compileall", "-q", "-b", str(root / "sglang")], check=True
    )
    for source in (root / "sglang").rglob("*.py"):
        source.unlink()
    for name, out in last_json(run(overlay_env, report(), [root])).items():
        if edited:
            assert (out["patched"], out["status"]["state"]) == (None, "unsupported")
            assert "not a known shape's" in out["status"]["reason"]
        else:
            assert (out["patched"], out["status"]["state"]) == (TARGETS[name][4], "applied")
            assert "bytecode only" in out["status"]["reason"]


FUSED = standin.FUSED_KV_MODULE.replace(".", "/") + ".py"
ALLOCATION = "        self._proj_workspace = torch.empty(\n"
RELEASED = "".join(
    f"        self.{a} = None\n" for a in ("_proj_workspace", "_k_workspace", "_v_workspace")
)


def _move_to_0_5_15_name(root):
    old = root / "sglang/srt/speculative/triton_ops/fused_kv_materialize.py"
    old.parent.mkdir(parents=True)
    for package in (old.parent, old.parent.parent):
        (package / "__init__.py").write_text("")
    (root / FUSED).rename(old)


def _prepend(text):
    return lambda root: (root / FUSED).write_text(text + (root / FUSED).read_text())


# What `status` (a fresh process) reports for the DSV4 and the fused-KV patch, for each
# setting and each release or environment that differs in the fused-KV module: (stand-in
# options, change, setting, exit, [(state, what its record names)] for 0001 and 0003).
CLI_CASES = {
    "known": ({}, None, {}, 0, [("applied", ""), ("applied", "")]),
    "unknown": ({"edit": UNKNOWN_EDIT, "fused_edit": FUSED_KV_UNKNOWN_EDIT}, None, {}, 1,
                [("unsupported", "unknown source"), ("unsupported", "unknown source")]),
    "all disabled": ({}, None, {"SGLANG_OVERLAY_DISABLE": "1"}, 0,
                     [("disabled", "turns every patch off"), ("disabled", "")]),
    "0003 disabled": ({}, None, {"SGLANG_OVERLAY_DISABLE": "0003"}, 0,
                      [("applied", ""), ("disabled", "lists 0003")]),
    # sglang's loader skips a plugin SGLANG_PLUGINS does not name; the .pth path must too
    "not in SGLANG_PLUGINS": ({}, None, {"SGLANG_PLUGINS": "other_plugin"}, 0,
                              [("disabled", "does not name sglang_overlay"), ("disabled", "")]),
    "junk strict value": ({}, None, {"SGLANG_OVERLAY_STRICT": "maybe"}, 1,
                          [("applied", "STRICT='maybe' not recognised"), ("applied", "")]),
    "no triton": ({}, _prepend("import triton_not_here  # noqa\n"), {}, 0,
                  [("applied", ""), ("not-present", "No module named 'triton_not_here'")]),
    "0.5.15 name": ({}, _move_to_0_5_15_name, {}, 0,
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
    "strict, dsv4 unknown": ({"edit": UNKNOWN_EDIT}, None, {"SGLANG_OVERLAY_STRICT": "1"}, 1,
                             [("failed", "UnsupportedShapeError"), ("applied", "")]),
}  # fmt: skip


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_status_reports_each_patch_on_its_own(one_env, tmp_path, case):
    options, change, variables, code, expected = CLI_CASES[case]
    root = standin.write(tmp_path / "standin", **options)
    if change is not None:
        change(root)
    proc = cli(one_env, [root], **variables)
    records = records_of(proc)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert [r["state"] for r in records] == [state for state, _ in expected], records
    for record, (_, named) in zip(records, expected, strict=True):
        assert named in json.dumps(record), record


SUBCLASS_IN_PLACE = """
import json, sglang_overlay
import {module} as m
class Vendor(m.{cls}):  # a plugin's class, put in the original's place by sglang's HookRegistry
{body}
m.{cls} = Vendor  # (a class REPLACE: setattr on the module; inheritance keeps working)
states = [sglang_overlay.status()[{index}]["state"], sglang_overlay.apply()[{index}]["state"]]
runs = getattr(Vendor.{method}, "__sglang_overlay_patch__", None)
states.append(sglang_overlay.remove()[{index}]["state"])
print(json.dumps([states, runs, getattr(Vendor.{method}, "__sglang_overlay_patch__", None)]))
"""


@both_patches
@pytest.mark.parametrize("overrides", [False, True], ids=["inherits", "overrides"])
def test_a_subclass_in_the_classs_place_is_reported_by_what_it_runs(
    one_env, known, target, overrides
):
    module, cls, method, index, patch_id = TARGETS[target]
    body = f"    def {method}(self, *args):\n        pass" if overrides else "    pass"
    code = SUBCLASS_IN_PLACE.format(module=module, cls=cls, method=method, index=index, body=body)
    proc = run(one_env, code, [known])
    states, runs, after_remove = last_json(proc)
    if overrides:  # the plugin's own method runs, not release-first
        assert (states[:2], runs) == (["pending", "unsupported"], None)
    else:  # release-first runs, inherited
        assert (states, runs) == (["applied", "applied", "pending"], patch_id)
        assert overlay_warnings(proc) == []
    assert after_remove is None
