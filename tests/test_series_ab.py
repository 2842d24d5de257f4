"""``series ab``: a fix's evidence from the series' own trees (base against base + fix)."""

import subprocess
import sys

from ci.__main__ import _parser as ci_parser
from tools.series import ab, seriesdir
from tools.series.__main__ import main


def test_the_plan_runs_the_fixs_own_tests_on_the_base_and_the_base_with_that_fix(tmp_path):
    series = seriesdir.load()
    fix = series.fix("0003")
    made = ab.plan(series, fix, tmp_path / "out", "cuda")
    args = ci_parser().parse_args(made.ci_run[1:])
    added = sorted(fix.added_files())
    assert made.ci_run[0] == "ci" and args.verb == "run" and args.backend == "cuda"
    assert list(args.tests) == added and all(p.startswith("test/registered/") for p in added)
    assert (args.unmodified_src, args.change_src) == (str(made.unmodified), str(made.change))
    assert made.unmodified != made.change and args.out == str(made.results)
    assert made.change.name == f"sglang-{series.base.version}-fix-0003"
    # Source sides only: the overlay is never asked for, and the CI mode is sglang's.
    assert args.outside_upstream_ci is False and args.git_base is None
    # Each file a fresh interpreter, as the description's commands run it.
    assert args.preload == "none"
    # The series' id reaches the results as a file (ci run never reads patches/ itself).
    assert args.series == str(made.series) == str(tmp_path / "out" / "series.json")


def test_ab_refuses_an_out_folder_that_already_holds_trees_in_one_line(capsys, tmp_path):
    (tmp_path / "trees").mkdir()
    code = main(["ab", "--fix", "0001", "--out", str(tmp_path), "--backend", "cpu"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "exists; give ab a new --out folder" in err


def test_the_plain_environment_imports_sglang_and_not_this_project(tmp_path):
    python = ab.plain_env(tmp_path / "venv")
    probe = "import importlib.util as u; print(bool(u.find_spec('sglang')), "
    probe += "bool(u.find_spec('sglang_overlay')), bool(u.find_spec('ci')))"
    out = subprocess.run([python, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


def test_a_demo_step_says_its_last_ci_run_line_and_names_its_log_when_it_failed(tmp_path):
    def step(name, code):
        say = f"import sys; print('ci run: started'); print('ci run: {name}'); sys.exit({code})"
        return [sys.executable, "-c", say], tmp_path / f"{name}.txt"

    assert ab._run(*step("ok", 0)) == (None, "ok")
    assert ab._run(*step("broke", 1)) == (tmp_path / "broke.txt", "broke")
