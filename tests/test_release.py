"""One version everywhere, and an sdist and a wheel that ``twine check`` accepts."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import clean_env
from overlay_envs import REPO

import sglang_overlay
from sglang_overlay import cli


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m build`` as the release workflow runs it, without build isolation."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_the_version_lives_in_one_place_and_every_report_shows_it(dist, capsys):
    version = sglang_overlay.__version__
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"sglang_overlay-{version}-py3-none-any.whl"
    with pytest.raises(SystemExit, match="^0$"):
        cli.main(["--version"])
    assert capsys.readouterr().out == f"sglang-overlay {version}\n"
    heading = re.search(r"^## (\S+) ", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert heading[1] == version, "CHANGELOG.md's first section must be the current version"
    assert re.search(r"^version\s*=", (REPO / "pyproject.toml").read_text(), flags=re.M) is None


def test_sdist_and_wheel_pass_twine_check_and_hold_the_start_up_hook(dist):
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    twine = [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)]
    proc = subprocess.run(twine, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the hook at the top of the wheel: site-packages reads .pth files there only
    assert "sglang_overlay.pth" in zipfile.ZipFile(wheel).namelist()
    with tarfile.open(sdist) as archive:
        tops = {Path(n).parts[1] for n in archive.getnames() if len(Path(n).parts) > 1}
    files = ".gitignore CHANGELOG.md LICENSE PKG-INFO README.md pyproject.toml sglang_overlay"
    assert sorted(tops) == files.split()


def test_the_readmes_operator_commands_give_every_patch_applied(tmp_path):
    # a fresh clone, and a venv seeing this one's packages but not its overlay
    checkout = tmp_path / "checkout"
    for name in ("sglang_overlay", "README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, checkout / name)
    env, shared = tmp_path / "sglang-env", tmp_path / "shared"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(env)], check=True)
    shared.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith("sglang_overlay") and entry.suffix != ".pth":
            (shared / entry.name).symlink_to(entry)
    (next((env / "lib").glob("python3*")) / "site-packages" / "shared.pth").write_text(
        f"{shared}\n"
    )
    (env / "bin" / "pip").write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n')
    (env / "bin" / "pip").chmod(0o755)
    path = f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}"
    variables = clean_env(PATH=path, PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")
    text = (REPO / "README.md").read_text().split("**Operators**", 1)[1]
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]  # its commands, comments dropped
    for command in [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]:
        proc = subprocess.run(
            command, shell=True, cwd=checkout, env=variables, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
    assert command == "sglang-overlay status" and str(env) in proc.stdout
    states = [line.split()[1] for line in proc.stdout.splitlines() if line[:4].isdigit()]
    assert states == ["applied"] * 6, proc.stdout
