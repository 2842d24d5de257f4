"""What `make` installs: the pins, the two install steps at once, a system torch reused."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
TORCH = REPO / "requirements/torch.txt"
CLOSURE = REPO / "requirements/cpu-closure.txt"


def pins(path: Path) -> dict:
    """{canonical name: version} of the ``name==version`` lines of a requirements file."""
    found = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {line!r} is not pinned with =="
            found[canonicalize_name(req.name)] = spec.version
    return found


FAKE_PIP = """#!/bin/sh
# Records each install; fails the one whose requirements file is $FAIL_ON, after a while.
echo "$*" >> "$LOG"
case "$*" in *"$FAIL_ON"*) sleep 0.3; exit 1;; esac
"""


@pytest.mark.parametrize(
    "failing", ["-r requirements/torch.txt", "-r requirements/cpu-closure.txt", ""]
)
def test_a_failure_of_either_step_run_at_once_fails_the_set_up(tmp_path, failing):
    # make's own recipe, with pip replaced by a script and a venv that already exists.
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv, pip, log = tmp_path / "venv", tmp_path / "pip", tmp_path / "log"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    for script, text in ((venv / "bin" / "python", "#!/bin/sh\n"), (pip, FAKE_PIP)):
        script.write_text(text)
        script.chmod(0o755)
    env = {**os.environ, "LOG": str(log), "FAIL_ON": failing or "nothing fails"}
    make = ["make", "-C", str(REPO), f"VENV={venv}", f"PIP={pip}", "venv"]
    proc = subprocess.run(make, env=env, capture_output=True, text=True, timeout=60)
    ran = log.read_text().splitlines()
    assert len(ran) == 3, ran  # the test tools, then both steps (each ran to its end)
    ready = list(venv.glob(".ready-sglang-*"))
    assert (proc.returncode != 0, len(ready)) == (bool(failing), 0 if failing else 1), proc.stderr


def _dependency_closure(names) -> set:
    """The canonical names of ``names`` and everything they need, from this venv's metadata."""
    from importlib import metadata

    seen, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_torchs_step_and_the_no_deps_step_share_no_package():
    # They run at once: a package in both would be written by two pips at the same time.
    torch_step = _dependency_closure(["torch", "torchvision"])
    assert {"numpy", "pillow", "filelock", "typing-extensions"} <= torch_step
    assert pins(TORCH)["torch"] == "2.14.1"
    no_deps_step = set(pins(CLOSURE)) | {"sglang"}
    assert not (torch_step | set(pins(TORCH))) & no_deps_step


def test_use_system_torch_reuses_the_pythons_torch_through_system_site_packages(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    argv = ["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", "USE_SYSTEM_TORCH=1"]
    plan = subprocess.run([*argv, "install"], capture_output=True, text=True, timeout=60).stdout
    assert "-m venv --system-site-packages" in plan and "-r requirements/torch.txt" not in plan
    assert "--no-deps -r requirements/cpu-closure.txt sglang==" in plan
