"""The release as an operator and the package index meet it: one version everywhere, an sdist
and a wheel that ``twine check`` accepts, and an upgrade from the previous build that replaces
its start-up hook (real pip, two real wheels).
"""

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import standin
from overlay_envs import REPO, find_interpreter, make_env

import sglang_overlay

# The last commit whose overlay still had wrapt and sglang_overlay/_startup.py: the previous
# layout, also version 0.1.0.
PREVIOUS_LAYOUT = "a599264"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m build`` as the release workflow runs it (the wheel built from the sdist),
    without build isolation: the pinned hatchling of this venv, no index."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_the_version_lives_in_one_place_and_every_report_shows_it(dist):
    version = sglang_overlay.__version__
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"sglang_overlay-{version}-py3-none-any.whl"
    cli = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "--version"], capture_output=True, text=True
    )
    assert (cli.returncode, cli.stdout.strip()) == (0, f"sglang-overlay {version}")
    heading = re.search(r"^## (\S+) ", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert heading[1] == version, "CHANGELOG.md's first section must be the current version"
    assert re.search(r"^version\s*=", (REPO / "pyproject.toml").read_text(), flags=re.M) is None


def test_sdist_and_wheel_pass_twine_check_and_hold_the_start_up_hook(dist):
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    files = [sdist, wheel]
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel_names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_overlay.pth" in wheel_names  # at the top: site-packages reads it there
    assert "sglang_overlay/activation.py" in wheel_names
    with tarfile.open(sdist) as archive:
        tops = {Path(n).parts[1] for n in archive.getnames() if len(Path(n).parts) > 1}
    assert tops == {
        "sglang_overlay",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "pyproject.toml",
        "PKG-INFO",
        ".gitignore",
    }


def _previous_wheel(out: Path) -> Path:
    source = out / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS_LAYOUT], capture_output=True, timeout=120
    )
    if archive.returncode != 0:
        pytest.skip(f"commit {PREVIOUS_LAYOUT} not in this clone (shallow?): {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("sglang_overlay-*.whl")
    return wheel


def test_upgrading_from_the_previous_layout_replaces_its_start_up_hook(tmp_path, dist):
    interpreter = find_interpreter("3.11") or Path(sys._base_executable)
    old = _previous_wheel(tmp_path / "old")
    (new,) = dist.glob("*.whl")
    env = make_env(interpreter, "3.11", old, tmp_path / "venv")
    assert (env.site_packages / "sglang_overlay" / "_startup.py").exists()
    assert "_startup" in (env.site_packages / "sglang_overlay.pth").read_text()

    upgrade = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env.python), "install", "-U"]
        + ["--no-deps", "--no-index", str(new)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert upgrade.returncode == 0, upgrade.stderr[-2000:]
    assert "already satisfied" not in upgrade.stdout, upgrade.stdout
    assert not (env.site_packages / "sglang_overlay" / "_startup.py").exists()
    pth = (env.site_packages / "sglang_overlay.pth").read_text()
    assert pth == (REPO / "sglang_overlay" / "sglang_overlay.pth").read_text()

    # The old hook warned through warnings.warn on an unknown shape, which -W error turns into
    # an exception in the user's import; the new one never does.
    unknown = standin.write(
        tmp_path / "standin", edit=("assert num_tokens > 0", "assert num_tokens >= 1")
    )
    code = (
        f"import sys; sys.path.insert(0, {str(unknown)!r}); import {standin.WORKSPACE_MODULE}; "
        "import sglang_overlay; print(sglang_overlay.__version__, sglang_overlay.status()[0]['state'])"
    )
    proc = subprocess.run(
        [str(env.python), "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [sglang_overlay.__version__, "unsupported"]
