"""``series pr-body``: sglang's PR template filled for one fix from its ``ci run`` results."""

import json
import shlex
import shutil

import pytest

from ci.evidence.model import load
from tools.series import pr_description, seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import REPO_ROOT

EVIDENCE = REPO_ROOT / "docs/evidence"
CUDA = EVIDENCE / "fix-0001/cuda"  # series ab's: plain sides, the series' own trees
DSV4_CPU = EVIDENCE / "fix-0001/cpu"
FUSED_KV = EVIDENCE / "fix-0003/cpu"
SECTIONS = ["## Motivation", "## Modifications", "## Accuracy Tests",
            "## Speed Tests and Profiling", "## Checklist"]  # fmt: skip


def _data(folder):
    return json.loads((folder / "results.json").read_text())


def _results(tmp_path, edit=None, source=CUDA):
    folder = shutil.copytree(source, tmp_path / "results")
    if edit:
        data = _data(folder)
        edit(data)
        (folder / "results.json").write_text(json.dumps(data))
    return folder


def _body(capsys, folder, *extra):
    code = main(["pr-body", "--results", str(folder), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out):
    return [line for line in out.splitlines() if line.startswith("| `test_")]


def _both_fixes(data):
    """The DSV4 CPU file's and the fused-KV file's cases in one run of today's series."""
    other = _data(FUSED_KV)
    data["files"] += other["files"]
    data["cases"] += other["cases"]
    data["series"] = seriesdir.summary(seriesdir.load())


def _other_series(data):
    data["series"]["id"] = data["series"]["fixes"][0]["id"] = "0" * 64


def _void(data):  # the listed regressions pass unmodified: the bug did not reproduce
    for case in data["cases"]:
        case["modes"]["unmodified"].update(outcome="pass", detail="", attempts=[])
    for file in data["files"]:
        file["modes"]["unmodified"]["returncode"] = 0


# case -> (source, edit of results.json, exit code, what err says)
REFUSALS = {
    "other-series": (CUDA, _other_series, 1, ["made for series 000000000000", "fix 0001 in patches/", "Run 'python -m ci run"]),
    "no-series": (CUDA, lambda d: d.pop("series"), 1, ["record no series id"]),
    "not-plain": (CUDA, lambda d: d["environment"].pop("plain"), 2, ["do not record a plain environment"]),
    "void": (CUDA, _void, 1, ["do not prove the change (void)"]),
    "two-fixes": (DSV4_CPU, _both_fixes, 2, ["tests of 0001 and 0003", "series ab --fix N"]),
    "no-folder": (None, None, 2, ["not a plain file"]),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSALS)
def test_results_that_are_no_evidence_for_the_fix_are_refused_in_one_line(capsys, tmp_path, case):
    source, edit, code, said = REFUSALS[case]
    folder = _results(tmp_path, edit, source) if source else tmp_path / "nothing"
    got, out, err = _body(capsys, folder, "--no-check")
    assert (got, out, len(err.splitlines())) == (code, "", 1), err
    assert all(part in err for part in said), err


def test_a_cuda_description_quotes_the_run_and_nothing_of_this_project(capsys, tmp_path):
    def with_project_state(data):  # what the record holds that upstream does not know
        data["environment"]["modes"]["change"]["overlay"] = {"state": "active"}

    code, out, err = _body(capsys, _results(tmp_path, with_project_state), "--no-check")
    assert code == 0, err
    positions = [out.index(heading + "\n") for heading in SECTIONS]
    assert positions == sorted(positions)
    assert "Drop self._buffer before calling torch.empty" in out  # 0001's Modifications
    data = _data(CUDA)
    assert len(_rows(out)) == len(data["cases"]) == out.count("| regression | Error | Pass |") == 3
    # The runner's peak is the whole process's, not the workspace's: the table quotes none.
    assert all(c["modes"]["change"].get("peak_mib") for c in data["cases"])
    assert "MiB" not in out.split("## Accuracy Tests")[1].split("Environment: ")[0]
    assert "| case | kind | sglang 0.5.23 | sglang 0.5.23 + this PR |" in out
    env = next(line for line in out.splitlines() if line.startswith("Environment: "))
    assert "NVIDIA H200" in env and "torch 2.11.0+cu130" in env and "sglang 0.5.23" in env
    assert "overlay" not in env and "commit " not in env
    for side in data["sides"].values():
        assert side["commit"][:12] not in out and side["tree"] not in out
    for f in data["files"]:
        assert f"on sglang 0.5.23 + this PR: {f['modes']['change']['duration_s']:.1f} s" in out
    # What unreleased branches may need is the cover letter's, not the fix's or the PR's.
    cover = " ".join((seriesdir.PATCHES_DIR / "0000-cover-letter.patch").read_text().split())
    assert "generation counter" in cover and "generation counter" not in " ".join(out.split())


def test_each_fix_is_described_from_its_own_patches_and_reproduced_on_sglang_alone(capsys):
    code, out, err = _body(capsys, FUSED_KV, "--no-check")
    assert code == 0, err
    env = next(line for line in out.splitlines() if line.startswith("Environment: "))
    assert env.startswith("Environment: CPU") and "CUDA" not in env and "H200" not in env
    text = out.replace(env, "")
    assert text.count("**DFlash: ") == 2 and "DSV4" not in text and "sparse" not in text
    assert len(_rows(out)) == len(_data(FUSED_KV)["cases"]) == 4
    assert "3 tests fail on sglang 0.5.23" in out and "3 regression, 1 preservation" in out
    block = out.split("To reproduce")[1].split("```bash\n")[1].split("```")[0]
    lines = [shlex.split(line, comments=True) for line in block.strip().splitlines()]
    run = [["PYTHONPATH=python", "SGLANG_IS_IN_CI=true", "python3", f["path"]]
           for f in _data(FUSED_KV)["files"]]  # fmt: skip
    # The fix's tests (fail), then the rest of it (pass); nothing of this project.
    assert lines == [["git", "checkout", "v0.5.23"], ["git", "apply", "--include=test/*", "pr.patch"],
                     *run, ["git", "apply", "--exclude=test/*", "pr.patch"], *run]  # fmt: skip
    assert block.index("# fails") < block.index("--exclude") < block.index("# passes")
    touched = seriesdir.load().fix("0003").touched_files()
    assert {p for p, new in touched.items() if new} == {p for p in touched if p.startswith("test/")}


def test_a_changed_fix_loses_its_evidence(capsys, tmp_path):
    patches = shutil.copytree(seriesdir.PATCHES_DIR, tmp_path / "patches")
    fused = next(patches.glob("0003-*.patch"))
    old, new = b"+        self._k_workspace = None", b"+        self._k = None"
    fused.write_bytes(fused.read_bytes().replace(old, new))
    argv = ["--patches", str(patches), "pr-body", "--results", str(FUSED_KV), "--no-check"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "fix 0003 in patches/ is" in err and "its code changed since that run" in err


def test_the_checklist_ticks_only_what_the_evidence_shows(capsys):
    series, results = seriesdir.load(), load(str(CUDA))
    fix, state = series.fix("0001"), pr_description.CheckState
    passed = pr_description.render(series, results, state(True, "hooks pass"), fix)
    skipped = pr_description.render(series, results, state(None, "not run"), fix)
    assert passed.count("- [x]") == skipped.count("- [x]") + 1  # the format box: hooks ran
    assert "- [x] Add unit tests" in passed and "- [ ] Update documentation" in passed
    # No benchmark is part of the evidence, and no tool checks the style guidance.
    assert "- [ ] Provide accuracy and speed benchmark results" in passed
    assert "- [ ] Follow the SGLang code style" in passed
    # pr-body runs check: upstream's hooks by name, no command of this project.
    code, out, err = _body(capsys, CUDA)
    assert code == 0 and "- [x] Format your code" in out and "black 24.10.0, " in out, err
    assert "tools.series" not in out and "python -m ci" not in out


@pytest.mark.parametrize(
    "body, sections",
    [
        ("Motivation\n\nWhy it matters.\n\nModifications\n\nWhat changed.",
         [("Motivation", "Why it matters."), ("Modifications", "What changed.")]),
        ("Just one paragraph.\n\nAnd another.", [("", "Just one paragraph.\n\nAnd another.")]),
        ("Tests\n\n  killed by a.py\n  b.py too", [("Tests", "```\nkilled by a.py\nb.py too\n```")]),
    ],
)  # fmt: skip
def test_message_sections_split_on_one_line_headings(body, sections):
    assert pr_description.message_sections(body) == sections


COMMITTED = sorted(REPO_ROOT.glob("docs/evidence/fix-*/*-pr-body.md"))


@pytest.mark.parametrize("committed", COMMITTED, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_every_committed_description_is_what_its_results_render_today(capsys, committed):
    """Nothing stale; only the format box differs, as ``check`` is not run here."""
    folder = committed.parent / committed.name.removesuffix("-pr-body.md")
    code, out, err = _body(capsys, folder, "--no-check")
    assert code == 0, err

    def content(text):
        return [line for line in text.splitlines() if "Format your code" not in line]

    assert content(out) == content(committed.read_text())
