"""Memory pictures: one PNG per regression case from the measured evidence, listed in the report."""

import json
from dataclasses import replace

import pytest
from ci_samples import model

from ci import pictures, render, results


def test_the_size_an_oom_asked_for_is_read_from_the_cpu_and_the_cuda_messages():
    cpu = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 100663296 bytes."
    cuda = "CUDA out of memory. Tried to allocate 96.00 MiB (GPU 0; 139.8 GiB total)"
    assert pictures.asked_mib(cpu) == 96.0
    assert pictures.asked_mib(cuda) == 96.0
    assert pictures.asked_mib("no size here") is None


def test_a_png_per_regression_case_only_and_the_report_lists_them(tmp_path):
    m = model()
    m = replace(m, pictures=pictures.draw_all(m, str(tmp_path)))
    (case,) = [c for c in m.cases if c.kind == "regression"]
    assert list(m.pictures) == [case.key]
    png = tmp_path / m.pictures[case.key]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = render.comment(m, "s", artifacts_url="https://ci/a")
    assert "Memory pictures" in text and "pictures/TestSparsePrefillWorkspaceCUDA.test" in text


def test_a_picture_path_outside_the_pictures_folder_is_rejected_on_load(tmp_path):
    data = model().to_json()
    data["pictures"] = {"x": "../../etc/passwd.png"}
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(results.ResultsError, match="pictures"):
        results.load(str(tmp_path))
