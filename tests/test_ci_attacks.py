"""What a hostile registered file hands on through ``ci run``."""

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace

import overlay_runs
import pytest
from ci_samples import file_run, model, workspace_runs
from conftest import REPO, clean_env

from ci.evidence import junit, shards
from ci.evidence.model import save
from ci.reporter import pictures, render


def test_lone_surrogates_from_a_test_process_reach_no_file_and_no_report(tmp_path):
    # json.loads turns "\\ud800" into a lone surrogate, which no UTF-8 writer accepts.
    base, change = workspace_runs()
    line = json.dumps({"test": "TestW.test_\ud800x", "outcome": "pass"})
    change = replace(change, channel=change.channel + line + "\n")
    environment = {"gpus": [{"name": "H\ud800"}], "modes": {"change": {"torch": "2.0\udfff"}}}
    m = model([base, change], environment=environment)
    save(m, str(tmp_path))
    junit.write(m, str(tmp_path))
    render.write_full_report(m, str(tmp_path))  # ci run's last steps
    for mode in m.modes:
        ET.parse(tmp_path / f"junit-{mode}.xml")  # well-formed XML, no &#55296;
    # What the report renders of the results it loads back: the escapes (ASCII), never raw.
    for text in (
        (tmp_path / "report.md").read_text(),
        render.comment(shards.load(str(tmp_path)), "s"),
    ):
        assert "torch 2.0\\\\udfff" in text and "test\\_\\\\ud800x" in text
        text.encode("utf-8")


def test_an_sglang_whose_ci_register_raises_is_a_usage_error_not_a_traceback(tmp_path):
    reader = tmp_path / "site" / "sglang" / "test" / "ci"
    reader.mkdir(parents=True)
    (tmp_path / "site" / "sglang" / "__init__.py").write_text("")
    (reader / "ci_register.py").write_text("raise RuntimeError('the PR broke the reader')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ci", "run", "--out", str(tmp_path / "out"), "--backend", "cpu"]
        + ["--change-env", "A=1"],
        cwd=REPO,
        env=clean_env(PYTHONPATH=str(tmp_path / "site")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = "ci_register.py: RuntimeError: the PR broke the reader"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and said in proc.stderr


# The shared default process (``overlay_runs``) imported sglang first: the reader is sglang's.
READER_AFTER_THE_REAL_IMPORT = overlay_runs.observe(
    "default_process",
    "reader_after_the_real_import",
    f"""
    sys.path.insert(0, {str(REPO)!r})
    import sglang.test.ci.ci_register
    from ci.runner import collect
    return collect.registry_reader().collect_tests is not None
    """,
)


default_process = overlay_runs.fixture("default_process")


def test_the_registry_reader_is_sglangs_after_sglang_itself_was_imported(default_process):
    assert default_process.value(READER_AFTER_THE_REAL_IMPORT) is True


def test_the_registry_reader_is_sglangs_on_a_namespace_path(tmp_path):
    # no __init__.py anywhere, and no installed sglang to win
    reader = tmp_path / "sglang" / "test" / "ci"
    reader.mkdir(parents=True)
    (installed,) = importlib.util.find_spec("sglang").submodule_search_locations
    real = os.path.join(installed, "test", "ci", "ci_register.py")
    (reader / "ci_register.py").write_text(open(real).read())
    code = "import sys\nfrom ci.runner import collect\n"
    code += "print(collect.registry_reader().__file__.startswith(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code, str(tmp_path)],
        cwd=REPO,
        env=clean_env(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)])),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "True", proc.stderr


@pytest.mark.parametrize(
    "name, peak",
    [("test_lone_\ud800", 96.0), ("test_$\\frac{$", 96.0), ("test_huge", 9.9e6)],
    ids=["surrogate", "mathtext", "huge-peak"],
)
def test_a_regression_case_matplotlib_cannot_draw_costs_its_picture_not_the_run(
    tmp_path, name, peak
):
    # Any name and number on the channel: each regression gets a picture.
    runs = [
        file_run("unmodified", [(name, "fail", "OOM", peak)]),
        file_run("change", [(name, "pass", "", peak)]),
    ]
    m = model(runs, patterns=[])
    assert [c.kind for c in m.cases] == ["regression"]
    m = replace(m, pictures=pictures.draw_all(m, str(tmp_path)))  # ci run's order from here
    save(m, str(tmp_path))
    junit.write(m, str(tmp_path))
    render.write_full_report(m, str(tmp_path))
    (case,) = shards.load(str(tmp_path)).cases  # the report takes it: no Infinity peak
    assert case.modes["change"].peak_mib == peak
