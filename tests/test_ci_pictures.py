"""Memory pictures: one PNG per measured regression case, none unmeasured."""

from dataclasses import replace

from ci_samples import model, workspace_runs

from ci.reporter import pictures, render


def test_a_png_per_measured_regression_case_only_and_the_report_lists_them(tmp_path):
    m = model()
    m = replace(m, pictures=pictures.draw_all(m, str(tmp_path)))
    (case,) = [c for c in m.cases if c.kind == "regression"]
    assert list(m.pictures) == [case.key]
    assert (tmp_path / m.pictures[case.key]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = render.comment(m, "s", artifacts_url="https://ci/a")
    assert "Memory pictures: 1 in the artifacts" in text


def test_without_a_measured_peak_on_both_sides_nothing_is_drawn(tmp_path):
    runs = workspace_runs()
    unmeasured = [replace(r, channel=r.channel.replace(', "peak_mib": 160.0', "")) for r in runs]
    assert pictures.draw_all(model(unmeasured), str(tmp_path)) == {}
    assert not (tmp_path / "pictures").exists()
