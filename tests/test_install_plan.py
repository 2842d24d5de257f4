"""What `make` installs, as a standard Linux machine would resolve it.

This machine kind has a local CPU build of torch and pip configuration pointing at it; a user's
machine has neither. The network tests switch all of that off (``PIP_CONFIG_FILE=/dev/null``,
``--isolated``, no find-links) and ask PyPI for the Makefile's two install steps as a dry run
for CPython 3.11 on manylinux x86_64. pip reads each wheel's metadata with HTTP range requests
(``fast-deps``); every byte it fetches goes through a counting proxy on loopback that cuts the
connection past a budget, so a pip that starts downloading the multi-GB CUDA wheels fails the
test instead of filling the disk. The dry runs ask the network: they run only with
``SGLANG_OVERLAY_NETWORK_TESTS=1`` (the default suite runs offline once the venv exists), and
skip, with the reason, where pip's default index cannot be reached or the venv's pip still
downloads whole wheels for a dry run. The index is pip's own default: nothing here names one.
"""

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
TORCH = REPO / "requirements/torch.txt"
CLOSURE = REPO / "requirements/cpu-closure.txt"
FETCH_BUDGET = 64 * 2**20  # the torch wheel alone is 526.6 MB; its metadata is a few kB
MANYLINUX_X86_64 = [
    "manylinux1_x86_64",
    "manylinux2010_x86_64",
    "manylinux2014_x86_64",
    *(f"manylinux_2_{minor}_x86_64" for minor in range(5, 29)),
]


# ------------------------------------------------------------------------------ the pinned files


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


def test_torch_is_pinned_apart_from_the_no_deps_closure():
    torch, closure = pins(TORCH), pins(CLOSURE)
    assert torch["torch"] == "2.14.1"
    assert "torch" not in closure and "triton" not in closure
    assert not set(torch) & set(closure), "one pin per package, in one file"


# ---------------------------------------------------------------- what the Makefile would run


def make_plan(tmp_path, *assignments) -> list:
    """The commands `make install` would run for a venv that does not exist yet (make -n)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", *assignments, "install"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "pip" in line or " venv " in line]


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
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / "bin" / "python").chmod(0o755)
    pip = tmp_path / "pip"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    log = tmp_path / "log"
    proc = subprocess.run(
        ["make", "-C", str(REPO), f"VENV={venv}", f"PIP={pip}", "venv"],
        env={**os.environ, "LOG": str(log), "FAIL_ON": failing or "nothing fails"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    ran = log.read_text().splitlines()
    assert len(ran) == 3, ran  # the test tools, then both steps (each ran to its end)
    ready = list(venv.glob(".ready-sglang-*"))
    if failing:
        assert proc.returncode != 0 and not ready, (proc.stdout, proc.stderr)
    else:
        assert proc.returncode == 0 and len(ready) == 1, proc.stderr


def _dependency_closure(names) -> set:
    """The canonical names of ``names`` and of everything they need, from this venv's metadata
    (requirements whose markers hold here, extras left out)."""
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
    no_deps_step = set(pins(CLOSURE)) | {"sglang"}
    assert not torch_step & no_deps_step, sorted(torch_step & no_deps_step)


def test_use_system_torch_reuses_the_pythons_torch_through_system_site_packages(tmp_path):
    lines = make_plan(tmp_path, "USE_SYSTEM_TORCH=1")
    assert any("-m venv --system-site-packages" in line for line in lines)
    assert not any("-r requirements/torch.txt" in line for line in lines)
    assert any("--no-deps -r requirements/cpu-closure.txt sglang==" in line for line in lines)


# ------------------------------------------------------------ PyPI as a standard machine sees it


class CountingProxy:
    """An HTTP CONNECT proxy on loopback that counts the bytes it brings back and stops
    forwarding once ``budget`` is spent."""

    def __init__(self, budget: int):
        self.budget, self.fetched, self.cut = budget, 0, False
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(5)
        self.server.close()

    def _serve(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client):
        upstream = None
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target = head.split(b"\r\n", 1)[0].decode().split()[:2]
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or not host:
                client.sendall(b"HTTP/1.1 405 CONNECT only\r\n\r\n")
                return
            upstream = socket.create_connection((host, int(port)), timeout=30)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self._pump(client, upstream)
        except OSError:
            pass
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def _pump(self, client, upstream):
        while not self.stopping.is_set():
            ready, _, _ = select.select([client, upstream], [], [], 30)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is upstream:
                    with self.lock:
                        self.fetched += len(data)
                        if self.fetched > self.budget:
                            self.cut = True
                            return
                    client.sendall(data)
                else:
                    upstream.sendall(data)


def _pip_reads_metadata_lazily() -> "str | None":
    """Why the dry run cannot be trusted not to download whole wheels, or None."""
    import pip

    if Version(pip.__version__) < Version("26"):
        return f"pip {pip.__version__} downloads whole wheels for a dry run; `make` installs 26.2"
    return None


NETWORK_OPT_IN = "SGLANG_OVERLAY_NETWORK_TESTS"
_UNREACHABLE = re.compile(r"(?i)(connection|network|resolve|timed out|proxy).*error|errno")


def standard_dry_run(tmp_path, *requirement_args) -> tuple:
    """(install plan {name: item}, bytes fetched) for CPython 3.11 on manylinux x86_64."""
    reason = _pip_reads_metadata_lazily()
    if reason:
        pytest.skip(reason)
    if os.environ.get(NETWORK_OPT_IN) != "1":
        pytest.skip(f"asks the package index: set {NETWORK_OPT_IN}=1 to run it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site config: no find-links, no local indexes
    report = tmp_path / "report.json"
    platforms = [arg for tag in MANYLINUX_X86_64 for arg in ("--platform", tag)]
    with CountingProxy(FETCH_BUDGET) as proxy:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--isolated",
                "--disable-pip-version-check",
                "--dry-run",
                "--ignore-installed",
                "--no-cache-dir",
                "--use-feature=fast-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                *platforms,
                "--target",
                str(tmp_path / "target"),
                "--proxy",
                proxy.url,
                "--report",
                str(report),
                "-q",
                *requirement_args,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    fetched = proxy.fetched
    assert not proxy.cut, f"pip fetched over {FETCH_BUDGET >> 20} MiB: it is downloading wheels"
    if proc.returncode != 0 and fetched == 0 and _UNREACHABLE.search(proc.stderr):
        pytest.skip("pip's default index is not reachable from here")
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = {
        canonicalize_name(item["metadata"]["name"]): item
        for item in json.loads(report.read_text())["install"]
    }
    print(f"dry run fetched {fetched / 2**20:.1f} MiB for {len(plan)} packages")
    return plan, fetched


def test_standard_machine_gets_pypis_torch_with_its_cuda_libraries_and_our_pins(tmp_path):
    # The Makefile's torch step, exactly: torch.txt with dependencies, the closure as constraints.
    plan, fetched = standard_dry_run(tmp_path, "-c", str(CLOSURE), "-r", str(TORCH))
    torch = plan["torch"]
    assert torch["metadata"]["version"] == "2.14.1"  # the index's default build, no local label
    assert torch["download_info"]["url"].startswith("https://")
    cuda = sorted(n for n in plan if n.startswith("nvidia-") or n.startswith("cuda-"))
    assert "cuda-toolkit" in cuda and "nvidia-cudnn-cu13" in cuda, cuda
    for name, version in pins(TORCH).items():
        assert plan[name]["metadata"]["version"] == version, name
    # The --no-deps step runs at the same time: none of its packages may come from this one.
    assert not set(plan) & set(pins(CLOSURE)), sorted(set(plan) & set(pins(CLOSURE)))
    assert fetched < FETCH_BUDGET


def test_standard_machine_finds_every_closure_pin_on_pypi_alone(tmp_path):
    plan, _ = standard_dry_run(tmp_path, "--no-deps", "-r", str(CLOSURE))
    got = {name: item["metadata"]["version"] for name, item in plan.items()}
    assert got == pins(CLOSURE)
    # torch and its CUDA libraries come only through torch's own resolution, never --no-deps.
    assert not [n for n in got if n in ("torch", "triton") or n.startswith("nvidia-")]
    for name, item in plan.items():
        url = item["download_info"]["url"]
        assert url.startswith("https://") and url.endswith(".whl"), (name, url)
