"""The registered test's registrations, read by sglang's own parser: upstream's suite names
and est_time values that match measured runs of the file (upstream shards suites by them)."""

import json

from tools.seriesdir import REPO_ROOT

TEST = REPO_ROOT / "test/registered/unit/layers/test_dsv4_sparse_prefill_workspace.py"
# Measured wall time of one `python FILE` with the change, per backend (committed evidence).
H200_RUN = REPO_ROOT / "docs/evidence/h200-0.5.23-series-ci/results.json"
CPU_BENCH = REPO_ROOT / "benchmark/results/cpu-x86_64-vm.json"


def _registrations():
    from sglang.test.ci.ci_register import collect_tests

    return {r.backend.name: r for r in collect_tests([str(TEST)], sanity_check=True)}


def _measured_seconds():
    h200 = json.loads(H200_RUN.read_text())
    cpu = json.loads(CPU_BENCH.read_text())["proof"]["ci_run"]["serial"]["processes_s"]
    return {
        "CUDA": h200["files"][0]["modes"]["change"]["duration_s"],
        "CPU": next(v for k, v in cpu.items() if k.endswith(" change")),
    }


def test_suites_are_spelled_as_upstream_spells_them():
    registrations = _registrations()
    assert registrations["CUDA"].effective_suite == "base-b-test-1-gpu-small"
    assert registrations["CPU"].effective_suite == "base-a-test-cpu"


def test_est_time_is_within_a_factor_of_two_of_the_measured_run():
    registrations, measured = _registrations(), _measured_seconds()
    for backend, seconds in measured.items():
        est = registrations[backend].est_time
        assert seconds / 2 <= est <= seconds * 2, f"{backend}: est_time {est}, measured {seconds}"
        assert est >= seconds, f"{backend}: est_time {est} under the measured {seconds:.1f} s"
