"""``series pr-body``: sglang's PR template filled, for one fix of the series, from that fix's
messages and a ``ci run`` results folder made with it, quoting only the tests the fix adds, and
refusing results made for other code."""

import json
import re
import shutil

import pytest

from ci.evidence.model import load
from tools.series import pr_description, seriesdir
from tools.series.__main__ import main
from tools.series.seriesdir import REPO_ROOT

H200_RESULTS = REPO_ROOT / "docs/evidence/h200-0.5.23-upstream-ci/cuda"
DSV4_CPU_RESULTS = REPO_ROOT / "docs/evidence/h200-0.5.23-upstream-ci/cpu"
FUSED_KV_RESULTS = REPO_ROOT / "docs/evidence/fix-0003/cpu"
SECTIONS = [
    "## Motivation",
    "## Modifications",
    "## Accuracy Tests",
    "## Speed Tests and Profiling",
    "## Checklist",
]


# Where the CUDA files were when the committed runs were made (issue 33 moved them to the kernel
# test tree): the copies name them where the series adds them now.
MOVED = {
    "test/registered/unit/layers/attention/test_dsv4_sparse_prefill_workspace.py": (
        "test/registered/kernels/ops/attention/dsv4/test_dsv4_sparse_prefill_workspace.py"
    ),
    "test/registered/unit/kernels/ops/speculative/test_fused_kv_workspace_peak.py": (
        "test/registered/kernels/ops/speculative/test_fused_kv_workspace_peak.py"
    ),
}


def _trees(data):
    """Both sides as ``ci run --unmodified-src BASE --change-src BASE+FIX`` records them."""
    for mode, tree in (("unmodified", "/tmp/sglang-0.5.23"), ("change", "/tmp/sglang-0.5.23-fix")):
        label = "sglang 0.5.23 @ " + "ab" * 6
        data["sides"][mode].update(overlay=False, tree=tree, commit="ab" * 20, label=label)


def _results(tmp_path, edit=None, source=H200_RESULTS, trees=True):
    """A copy of a real ci run, stamped with this series' ids (as a run of it would be) and,
    unless ``trees`` is false, with series-tree sides (the DSV4 runs used the overlay)."""
    folder = tmp_path / "results"
    shutil.copytree(source, folder)
    text = (folder / "results.json").read_text()
    for old, new in MOVED.items():
        text = text.replace(old, new)
    data = json.loads(text)
    described = seriesdir.describe(seriesdir.PATCHES_DIR)
    data["series"] = {k: described[k] for k in ("id", "release", "patches", "fixes")}
    if trees:
        _trees(data)
    data["environment"]["plain"] = True  # as series ab records it
    if edit:
        edit(data)
    (folder / "results.json").write_text(json.dumps(data))
    return folder


def _body(capsys, folder, *extra):
    code = main(["pr-body", "--results", str(folder), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_body_has_sglangs_five_sections_in_order(capsys, tmp_path):
    code, out, err = _body(capsys, _results(tmp_path), "--no-check")
    assert code == 0, err
    positions = [out.index(heading + "\n") for heading in SECTIONS]
    assert positions == sorted(positions)
    assert "Drop self._buffer before calling torch.empty" in out  # 0001's Modifications
    prose = " ".join(out.split())
    # What unreleased branches may need is the cover letter's, not the fix's or the PR's.
    cover = (seriesdir.PATCHES_DIR / "0000-cover-letter.patch").read_text()
    for speculation in ("#40421", "generation counter"):
        assert speculation not in prose and speculation in " ".join(cover.split())
    fix = next(seriesdir.PATCHES_DIR.glob("0001-*.patch")).read_text()
    assert "#40421" not in fix and "generation counter" not in fix


def test_every_case_outcome_comes_from_the_results_and_no_process_peak(capsys, tmp_path):
    _, out, _ = _body(capsys, _results(tmp_path), "--no-check")
    data = json.loads((H200_RESULTS / "results.json").read_text())
    rows = [line for line in out.splitlines() if re.match(r"\| `test_", line)]
    assert len(rows) == len(data["cases"])
    # The runner's peak is the whole process's, not the workspace's: the table quotes none.
    assert any(c["modes"]["change"].get("peak_mib") for c in data["cases"])
    assert "MiB" not in out.split("## Accuracy Tests")[1].split("Environment: ")[0]
    regressions = sum(c["kind"] == "regression" for c in data["cases"])
    assert out.count("| regression | Error | Pass |") == regressions == 3
    assert "| case | kind | sglang 0.5.23 | sglang 0.5.23 + this PR |" in out
    assert "NVIDIA H200" in out and "torch 2.11.0+cu130" in out
    for f in data["files"]:
        duration = f["modes"]["change"]["duration_s"]
        assert f"on sglang 0.5.23 + this PR: {duration:.1f} s" in out


def test_results_made_for_another_series_are_refused(capsys, tmp_path):
    def edit(data):
        data["series"]["id"] = "0" * 64
        data["series"]["fixes"][0]["id"] = "0" * 64

    code, out, err = _body(capsys, _results(tmp_path, edit), "--no-check")
    assert code == 1 and out == ""
    assert "made for series 000000000000" in err and "Run 'python -m ci run" in err
    assert "fix 0001 in patches/" in err


def test_results_made_with_the_runtime_overlay_are_one_line_and_exit_2(capsys, tmp_path):
    # The DSV4 evidence committed before issue 33 ran the change side with the overlay.
    for folder in (H200_RESULTS, DSV4_CPU_RESULTS):
        assert load(str(folder)).sides["change"].overlay is True
        code, out, err = _body(capsys, folder, "--no-check")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "change side of the results ran with the runtime overlay" in err


def test_results_not_made_from_a_plain_environment_are_one_line_and_exit_2(capsys, tmp_path):
    def with_this_project(data):
        del data["environment"]["plain"]

    code, out, err = _body(capsys, _results(tmp_path, with_this_project), "--no-check")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "do not record a plain environment" in err


def test_results_of_the_installed_sglang_without_a_tree_are_one_line_and_exit_2(capsys, tmp_path):
    def installed(data):
        data["sides"]["unmodified"].update(tree=None, commit=None)

    code, out, err = _body(capsys, _results(tmp_path, installed), "--no-check")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "unmodified side of the results ran with no source tree" in err


def test_columns_name_the_release_and_this_pr_never_a_local_commit(capsys, tmp_path):
    code, out, err = _body(capsys, _results(tmp_path), "--no-check")
    assert code == 0, err
    assert "| case | kind | sglang 0.5.23 | sglang 0.5.23 + this PR |" in out
    assert "abababababab" not in out and "this change" not in out
    assert "(id " not in out and str(tmp_path) not in out


def test_the_environment_line_holds_no_overlay_state_and_no_project_commit(capsys, tmp_path):
    data = json.loads((H200_RESULTS / "results.json").read_text())
    assert data["environment"]["modes"]["change"]["overlay"] and data["environment"]["git"]
    code, out, err = _body(capsys, _results(tmp_path), "--no-check")
    assert code == 0, err
    environment = next(line for line in out.splitlines() if line.startswith("Environment: "))
    assert "overlay" not in environment and "commit " not in environment
    assert "NVIDIA H200" in environment and "sglang 0.5.23" in environment


def test_each_fix_is_described_from_its_own_patches_and_tests_only(capsys):
    code, out, err = _body(capsys, FUSED_KV_RESULTS, "--no-check")
    assert code == 0, err
    # The environment line says what the run's processes held (the installed overlay among it).
    text = "\n".join(line for line in out.splitlines() if not line.startswith("Environment: "))
    assert text.count("**DFlash: ") == 2 and "DSV4" not in text and "sparse" not in text
    rows = [line for line in out.splitlines() if line.startswith("| `test_")]
    data = json.loads((FUSED_KV_RESULTS / "results.json").read_text())
    assert len(rows) == len(data["cases"]) == 4
    assert "3 tests fail on sglang 0.5.23" in out and "3 regression, 1 preservation" in out


def _both_fixes(data):
    """The DSV4 CPU companion's and the fused-KV companion's cases in one run, as one
    ``ci run --tests test/registered`` on CPU would give them (sides taken from the first)."""
    other = json.loads((FUSED_KV_RESULTS / "results.json").read_text())
    data["files"] += other["files"]
    data["cases"] += other["cases"]


def test_a_run_holding_two_fixes_tests_gives_one_description_per_fix(capsys, tmp_path):
    folder = _results(tmp_path, _both_fixes, source=DSV4_CPU_RESULTS)
    code, out, err = _body(capsys, folder, "--no-check")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "tests of 0001 and 0003" in err and "--fix" in err
    bodies = {}
    for fix in ("0001", "0003"):
        code, bodies[fix], err = _body(capsys, folder, "--no-check", "--fix", fix)
        assert code == 0, err
    dsv4 = [line for line in bodies["0001"].splitlines() if line.startswith("| `test_")]
    fused = [line for line in bodies["0003"].splitlines() if line.startswith("| `test_")]
    assert len(dsv4) == 3 and all("scratch" in line or "head" in line for line in dsv4)
    assert len(fused) == 4 and all("workspace" in line for line in fused)
    assert "3 tests on the cpu backend: 3 regression." in bodies["0001"]
    assert "test_fused_kv" not in bodies["0001"] and "test_dsv4" not in bodies["0003"]


def test_a_fix_whose_code_changed_loses_its_evidence_and_the_other_keeps_its_own(capsys, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(seriesdir.PATCHES_DIR, patches)
    fused = next(patches.glob("0003-*.patch"))
    fused.write_bytes(
        fused.read_bytes().replace(b"+        self._k_workspace = None", b"+        self._k = None")
    )
    folder = _results(tmp_path, _both_fixes, source=DSV4_CPU_RESULTS)
    argv = ["--patches", str(patches), "pr-body", "--results", str(folder), "--no-check"]
    assert main([*argv, "--fix", "0001"]) == 0
    assert main([*argv, "--fix", "0003"]) == 1
    err = capsys.readouterr().err
    assert "fix 0003 in patches/ is" in err and "its code changed since that run" in err


def test_a_fix_the_results_hold_no_test_of_or_the_series_lacks_is_one_line_and_exit_2(
    capsys, tmp_path
):
    for fix, said in (("0003", "hold no test of fix 0003"), ("0002", "no fix starting at")):
        folder = _results(tmp_path / fix, source=DSV4_CPU_RESULTS)
        code, out, err = _body(capsys, folder, "--no-check", "--fix", fix)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert said in err, err


def test_a_broken_test_of_the_other_fix_refuses_both_descriptions(capsys, tmp_path):
    def broken(data):
        _both_fixes(data)
        case = next(c for c in data["cases"] if "fused_kv" in c["file"])
        case["modes"]["change"].update(outcome="fail", attempts=["fail", "fail"])
        data["verdict"], data["reasons"] = "failed", ["1 test fails with the change"]

    folder = _results(tmp_path, broken, source=DSV4_CPU_RESULTS)
    for fix in ("0001", "0003"):
        code, out, err = _body(capsys, folder, "--no-check", "--fix", fix)
        assert code == 1 and out == "" and "do not prove the change (failed)" in err


def test_results_that_record_no_series_are_refused(capsys, tmp_path):
    def edit(data):
        del data["series"]

    code, out, err = _body(capsys, _results(tmp_path, edit), "--no-check")
    assert code == 1 and out == "" and "record no series id" in err


def test_a_missing_results_folder_is_a_usage_error(capsys, tmp_path):
    code, _, err = _body(capsys, tmp_path / "nothing")
    assert code == 2 and "not a plain file" in err


def test_the_checklist_ticks_only_what_the_evidence_shows(tmp_path):
    series, results = seriesdir.load(), load(str(_results(tmp_path)))
    passed = pr_description.render(series, results, pr_description.CheckState(True, "hooks pass"))
    skipped = pr_description.render(series, results, pr_description.CheckState(None, "not run"))
    assert passed.count("- [x]") == skipped.count("- [x]") + 1  # the format box: hooks ran
    assert "- [x] Add unit tests" in passed and "- [ ] Update documentation" in passed
    # No benchmark is part of the evidence, and no tool checks the style guidance.
    assert "- [ ] Provide accuracy and speed benchmark results" in passed
    assert "- [ ] Follow the SGLang code style" in passed


def test_results_from_files_the_series_does_not_add_are_one_line_and_exit_2(capsys, tmp_path):
    proof = "test/proofs/cpu/test_dsv4_workspace_cpu_peak.py"

    def from_the_cpu_proof(data):
        for item in (*data["files"], *data["cases"]):
            key = "path" if "path" in item else "file"
            item[key] = proof

    code, out, err = _body(capsys, _results(tmp_path, from_the_cpu_proof), "--no-check")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"the results hold {proof}, which the series does not add" in err


def _reproduce(out):
    import shlex

    block = out.split("To reproduce")[1].split("```bash\n")[1].split("```")[0]
    return [shlex.split(line, comments=True) for line in block.strip().splitlines()]


def test_to_reproduce_runs_on_an_sglang_checkout_alone(capsys):
    code, out, err = _body(capsys, FUSED_KV_RESULTS, "--no-check")
    assert code == 0, err
    lines = _reproduce(out)
    assert lines[0] == ["git", "checkout", "v0.5.23"]
    tests = [
        f["path"] for f in json.loads((FUSED_KV_RESULTS / "results.json").read_text())["files"]
    ]
    run = [["PYTHONPATH=python", "SGLANG_IS_IN_CI=true", "python3", t] for t in tests]
    assert lines[1:] == [
        ["git", "apply", "--include=test/*", "pr.patch"],
        *run,
        ["git", "apply", "--exclude=test/*", "pr.patch"],
        *run,
    ]
    # Nothing of this project: no make, no venv, no ci or series command, no local folder.
    block = out.split("To reproduce")[1].split("## Speed")[0]
    for project in ("make", ".venv", "python -m", "tools.series", "/tmp/"):
        assert project not in block


def test_the_fixs_tests_fail_on_the_base_and_pass_with_the_whole_pr(capsys, tmp_path):
    # The two halves of pr.patch are the fix's own patches: its tests, then the rest.
    fix = seriesdir.load().fix("0003")
    touched = fix.touched_files()
    assert {p for p, new in touched.items() if new} == {p for p in touched if p.startswith("test/")}
    code, out, err = _body(capsys, FUSED_KV_RESULTS, "--no-check")
    text = out.split("To reproduce")[1]
    assert text.index("# fails") < text.index("--exclude") < text.index("# passes")


def test_pr_body_runs_check_and_ticks_the_format_box(capsys, tmp_path):
    code, out, err = _body(capsys, _results(tmp_path))
    assert code == 0, err
    assert "- [x] Format your code" in out and "upstream's pinned hooks pass" in out
    # upstream's hooks by name; no command of this project
    assert "black 24.10.0, " in out and "tools.series" not in out and "python -m ci" not in out


@pytest.mark.parametrize(
    "body, headings",
    [
        (
            "Motivation\n\nWhy it matters.\n\nModifications\n\nWhat changed.",
            ["Motivation", "Modifications"],
        ),
        ("Just one paragraph.\n\nAnd another.", [""]),
    ],
)
def test_message_sections_split_on_one_line_headings(body, headings):
    assert [h for h, _ in pr_description.message_sections(body)] == headings


def test_an_indented_block_becomes_a_fenced_block_of_no_language():
    ((_, text),) = pr_description.message_sections("Tests\n\n  killed by a.py\n  b.py too")
    assert text == "```\nkilled by a.py\nb.py too\n```"


def test_results_of_another_release_or_a_void_proof_are_refused(capsys, tmp_path):
    def other_release(data):
        data["sides"]["unmodified"].update(sglang="0.5.22", label="sglang 0.5.22")

    code, out, err = _body(capsys, _results(tmp_path, other_release), "--no-check")
    assert code == 1 and out == "" and "ran on sglang 0.5.22" in err and "0.5.23" in err

    def void(data):  # the listed regressions pass unmodified: the bug did not reproduce
        for case in data["cases"]:
            case["modes"]["unmodified"].update(outcome="pass", detail="", attempts=[])
        for file in data["files"]:
            file["modes"]["unmodified"]["returncode"] = 0

    code, out, err = _body(capsys, _results(tmp_path / "v", void), "--no-check")
    assert code == 1 and out == "" and "do not prove the change (void)" in err


def test_a_cpu_runs_description_names_the_cpu_and_no_cuda(capsys, tmp_path):
    code, out, err = _body(capsys, _results(tmp_path, source=DSV4_CPU_RESULTS), "--no-check")
    assert code == 0, err
    environment = next(line for line in out.splitlines() if line.startswith("Environment: "))
    assert environment.startswith("Environment: CPU") and "CUDA" not in environment
    assert "H200" not in environment


COMMITTED = sorted(REPO_ROOT.glob("docs/evidence/fix-*/*-pr-body.md"))


@pytest.mark.parametrize("committed", COMMITTED, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_every_committed_description_is_what_its_results_render_today(capsys, committed):
    """The committed evidence of each fix still renders (a change of a fix's code or tests
    changes its id and refuses its old folder) and gives the committed text: nothing stale.
    Only the format box differs, as ``check`` is not run here."""
    fix = committed.parent.name.removeprefix("fix-")
    folder = committed.parent / committed.name.removesuffix("-pr-body.md")
    code, out, err = _body(capsys, folder, "--fix", fix, "--no-check")
    assert code == 0, err

    def content(text):
        return [line for line in text.splitlines() if "Format your code" not in line]

    assert content(out) == content(committed.read_text())
