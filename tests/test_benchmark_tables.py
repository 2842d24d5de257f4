"""BENCHMARKS.md rendering and chart inputs, from hand-made result dicts: no measuring."""

import pickle

from tools.benchmark import charts, summary, tables


def _peaks(change_ratio=1.0):
    return {
        "device": "cpu",
        "repeats": 1,
        "method": "smallest RLIMIT_AS budget that passes",
        "transitions": {
            "grow_bf16_64_to_96_mib": {
                "steps": "65536:bfloat16,98304:bfloat16",
                "old_mib": 64.0,
                "new_mib": 96.0,
                "limit_ratio": 1.0,
                "probes": 4,
                "unmodified": {"peak_mib": summary([161]), "ratio": summary([161 / 96])},
                "change": {"peak_mib": summary([96]), "ratio": summary([change_ratio])},
            }
        },
    }


def _fit():
    row = {"cap_mib": 128, "held_mib": 64, "limit_mib": 128.0, "probes": 5}
    row.update(unmodified=summary([64]), change=summary([128]))
    return {
        "device": "cuda",
        "repeats": 1,
        "granularity_mib": 2.0,
        "resolution_mib": 1,
        "method": "bisection",
        "rows": [row],
    }


def _proof(file_s, ab_s, bare_s=12.0, device="cuda"):
    """What ``tools.benchmark.proof.measure`` records, with one repeat of each command."""
    return {
        "file": "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py",
        "repeats": 1,
        "seconds": {k: summary([v]) for k, v in (("import", bare_s), ("file", file_s), ("ab", ab_s))},
        "returncodes": {"file": [0], "ab": [0]},
        "over_bare_import": {"file": round(file_s / bare_s, 2), "ab": round(ab_s / bare_s, 2)},
        "goals": {"file": 1.5, "ab": 1.5} if device == "cuda" else {},
    }


def _report(**parts):
    return dict(
        machine="m",
        device="cuda",
        torch="2.11",
        generated="today",
        command="python -m tools.benchmark",
        **parts,
    )


def test_a_change_at_the_limit_meets_the_peak_goal_and_names_the_command():
    text = "\n".join(tables.peaks_table(_report(peaks=_peaks(1.0))))
    assert "| grow_bf16_64_to_96_mib | 64 -> 96 | 1.68 | 1.00 | 1.00 | 4 |" in text
    assert "Reproduce: `python -m tools.benchmark --parts peaks`" in text
    assert "goal met" in text


def test_a_change_above_the_limit_states_the_missed_goal_with_its_figure():
    text = "\n".join(tables.peaks_table(_report(peaks=_peaks(1.67))))
    assert "**goal missed**: grow_bf16_64_to_96_mib 1.67 > 1.00" in text


def test_nothing_larger_than_the_held_buffer_is_shown_as_such():
    text = "\n".join(tables.fit_table(_report(largest_fit=_fit())))
    assert "| 128 | 64 | none larger than held | 128 | 128 | 5 |" in text
    assert "goal met" in text


def test_the_proof_table_gives_each_command_over_a_bare_import_and_judges_its_goal():
    text = "\n".join(tables.proof_table(_report(proof=_proof(file_s=18.0, ab_s=24.0))))
    assert "| 1.50x | 18.0 | [0] | goal met (at most 1.5x) |" in text
    assert "| 2.00x | 24.0 | [0] | **goal missed**: at most 1.5x |" in text
    assert "one bare import: 12.0 s" in text


def test_a_cpu_proof_has_no_goal_to_judge():
    text = "\n".join(tables.proof_table(_report(proof=_proof(20.0, 30.0, device="cpu"))))
    assert "goal" not in text.split("| --- |")[-1] and "| 1.67x |" in text


def test_update_keeps_prose_outside_the_markers_and_orders_cuda_machines_first():
    document = f"intro\n{tables.START}\nstale-table\n{tables.END}\noutro\n"
    cpu = _report(peaks=_peaks())
    cpu["device"] = "cpu"
    text = tables.update(document, {"a-cpu": cpu, "z-gpu": _report(peaks=_peaks())})
    assert text.startswith("intro\n") and text.endswith("outro\n") and "stale-table" not in text
    assert text.index("### z-gpu") < text.index("### a-cpu")
    assert tables.update(text, {"a-cpu": cpu, "z-gpu": _report(peaks=_peaks())}) == text


def test_a_failed_part_is_reported_under_its_machine():
    text = tables.render({"m": _report(errors={"proof": "ChildFailed: no result"})})
    assert "Part `proof` failed on this machine: `ChildFailed: no result`" in text


def test_timeline_points_follow_allocs_and_completed_frees(tmp_path):
    mib = 1 << 20
    events = [
        {"action": "segment_alloc", "size": 128 * mib, "time_us": 0},
        {"action": "alloc", "size": 64 * mib, "time_us": 1000},
        {"action": "alloc", "size": 96 * mib, "time_us": 3000},
        {"action": "free_requested", "size": 64 * mib, "time_us": 4000},
        {"action": "free_completed", "size": 64 * mib, "time_us": 4500},
    ]
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [events]}))
    assert charts.timeline_points(str(path)) == [[0.0, 64.0], [2.0, 160.0], [3.5, 96.0]]


def test_charts_are_written_as_png(tmp_path):
    charts.peak_figure(_peaks(), "t").savefig(tmp_path / "p.png")
    timeline = {"new_mib": 96.0, "unmodified": [[0, 64], [1, 160]], "change": [[0, 64], [1, 96]]}
    charts.timeline_figure(timeline, "t").savefig(tmp_path / "t.png")
    for name in ("p.png", "t.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_a_figure_equal_to_the_limit_gets_no_above_the_limit_note_even_with_a_stale_stored_limit():
    fit = _fit()
    fit["rows"][0]["limit_mib"] = 126.0  # what an older run stored for a 2 MiB granularity
    text = "\n".join(tables.fit_table(_report(largest_fit=fit)))
    assert "| 128 | 64 | none larger than held | 128 | 128 | 5 |" in text
    assert "above the limit" not in text and "goal met" in text


def test_only_a_cpu_figure_above_the_limit_is_explained_by_the_address_space_cap():
    fit = _fit()
    fit["rows"][0]["change"] = summary([129])
    cuda = "\n".join(tables.fit_table(_report(largest_fit=fit)))
    assert "A figure above the limit: the allocator held more" in cuda and "on CPU" not in cuda
    fit.update(device="cpu", granularity_mib=1 / 256)
    cpu = "\n".join(tables.fit_table(_report(largest_fit=fit)))
    assert "A figure above the limit on CPU" in cpu
