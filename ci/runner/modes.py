"""The two sides of the A/B: which sglang each mode runs, under which environment, and the label
that names it in every report. By default both run the installed sglang, overlay off
(``unmodified``) and on (``change``); given source trees, a side puts its tree's ``python/``
first on ``PYTHONPATH`` and the overlay is off on both (ci/README.md, "Run the A/B").
"""

import os
import re
from dataclasses import dataclass

from ci.evidence.model import MODES, Side
from ci.runner import RequestError

DISABLE_ENV = "SGLANG_OVERLAY_DISABLE"
# What sglang's CI sets that changes how a test behaves (ci/README.md, "As upstream's CI runs
# it", says where each was read): SGLANG_IS_IN_CI turns on CustomTestCase's retry and the
# other CI-only paths; DeepGEMM's JIT warms up the fast way. SGLANG_TEST_MAX_RETRY is not set
# there, so a caller's value would change the retry: it goes.
UPSTREAM_CI_ENV = {"SGLANG_IS_IN_CI": "true", "SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "true"}
UPSTREAM_CI_UNSET = ("SGLANG_TEST_MAX_RETRY",)
# Anything that looks like a credential stays out of the test processes: they run PR code.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY", re.I)


@dataclass(frozen=True)
class ModeSetup:
    """How one mode's test processes run."""

    mode: str
    tree: str | None = None  # a folder holding python/sglang, first on PYTHONPATH
    overlay: bool = False


def setups(modes, unmodified_src=None, change_src=None) -> dict:
    """mode -> ModeSetup for each of ``modes``."""
    trees = dict(zip(MODES, (unmodified_src, change_src), strict=True))
    for mode, tree in trees.items():
        if tree and not os.path.isdir(os.path.join(tree, "python", "sglang")):
            raise RequestError(f"--{mode}-src {tree}: no python/sglang inside")
    overlay_is_the_change = not any(trees.values())
    return {
        mode: ModeSetup(
            mode,
            os.path.abspath(trees[mode]) if trees[mode] else None,
            overlay=overlay_is_the_change and mode == "change",
        )
        for mode in modes
    }


def environment(setup: ModeSetup, base: dict | None = None, upstream_ci: bool = True) -> dict:
    """The environment one mode's test processes start with (``base``: os.environ): as in
    sglang's CI unless ``upstream_ci`` is False, then as on a developer's machine."""
    base = os.environ if base is None else base
    env = {name: value for name, value in base.items() if not _SECRET_NAME.search(name)}
    for name in (DISABLE_ENV, *UPSTREAM_CI_ENV, *UPSTREAM_CI_UNSET):
        env.pop(name, None)
    if upstream_ci:
        env.update(UPSTREAM_CI_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    if not setup.overlay:
        env[DISABLE_ENV] = "1"
    if setup.tree:
        src = os.path.join(setup.tree, "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def side(setup: ModeSetup, record: dict, commit: str | None = None) -> Side:
    """The mode as the reports name it, from what its test processes imported."""
    version = record.get("sglang")
    label = f"sglang {version or '(version unknown)'}"
    if setup.tree:
        label += f" @ {commit[:12]}" if commit else f" ({os.path.basename(setup.tree)})"
    if setup.overlay:
        label += " + this change"
    return Side(label, version, setup.tree, commit, setup.overlay)


def imported_elsewhere(setup: ModeSetup, record: dict) -> str | None:
    """Why a mode's processes did not run the sglang it was meant to, or None."""
    path = record.get("sglang_path")
    # No process imported sglang (the tests say so themselves), or any installed one will do.
    if not (path and setup.tree):
        return None
    src = os.path.realpath(os.path.join(setup.tree, "python"))
    if os.path.commonpath([src, os.path.realpath(path)]) != src:
        return f"{setup.mode} imported sglang from {path}, not from {setup.tree}"
    return None
