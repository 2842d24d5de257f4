"""The evidence contract: result channel, judging, verdict, results.json at load."""

import json
import re
from dataclasses import FrozenInstanceError, replace

import pytest
from ci_samples import CLS, FILE, TRACEBACK, file_run, model, sides
from conftest import REPO

from ci.evidence import judge
from ci.evidence.judge import FileRun, read_channel
from ci.evidence.model import (
    FILE_CASE,
    EvidenceError,
    ProcessEnd,
    Results,
    TestResult,
    load,
    save,
)

# What one test reported on its channel, by name.
REPORTS = {
    "pass": {"outcome": "pass"},
    "fail": {"outcome": "fail", "detail": TRACEBACK},
    "skip": {"outcome": "skip", "detail": "no GPU"},
    "retry": {"outcome": "pass", "attempts": ["fail", "pass"], "detail": "attempt 1 failed"},
    "unseen": {"outcome": "pass", "unobserved": True},
    "expected-failure": {"outcome": "pass", "attempts": ["fail"]},
    "fails-every-attempt": {"outcome": "error", "attempts": ["fail", "fail"], "detail": "x"},
}
PROCESS = ("returncode", "timed_out", "channel", "output")


def _line(test, report):
    return json.dumps({"test": f"{CLS}.{test}", "duration_s": 0.5, **REPORTS[report]}) + "\n"


def _side(mode, spec):
    spec = dict(p.split("=") for p in spec.split()) if isinstance(spec, str) else spec
    tests = {t: r for t, r in spec.items() if t not in PROCESS}
    failed = any(REPORTS[r]["outcome"] in ("fail", "error") for r in tests.values())
    channel = "".join(_line(t, r) for t, r in tests.items()) + spec.get("channel", "")
    end = ProcessEnd(spec.get("returncode", int(failed)), 30.0, spec.get("timed_out", False))
    return FileRun(FILE, mode, end, spec.get("output", ""), channel)


FIXED, BOTH = "grow=fail reuse=pass", "grow=pass reuse=pass"
BASE, CHANGE = "sglang 0.5.23", "sglang 0.5.23 + this change"
# fmt: off
WAYS = [  # unmodified, with the change, kinds ("file": the whole file), verdict, what is said
    ("fixed", FIXED, BOTH, "grow=regression reuse=preservation", "ok", ()),
    ("passes-unmodified", BOTH, BOTH, "grow=not-reproduced reuse=preservation", "void", (
        f"the bug did not reproduce: 1 listed regressions pass on {BASE} ({CLS}.grow); "
        "is the change already in it?", judge.FLAG_NOT_REPRODUCED)),
    ("skips-unmodified", "grow=skip reuse=pass", BOTH, "grow=not-reproduced reuse=preservation",
     "void", ("1 listed regressions skip or give no result",)),
    ("missing-unmodified", "reuse=pass", BOTH, "reuse=preservation grow=not-reproduced", "void",
     ("skip or give no result",)),
    ("nothing-ran-unmodified", "grow=skip reuse=skip", BOTH, "grow=not-reproduced reuse=no-baseline",
     "void", (f"the unmodified side ({BASE}) gave no verdict: no test ran there",)),
    # a new module and its test: the base cannot even import the file
    ("import-error-unmodified", {"returncode": 1, "output": "ModuleNotFoundError: No module named"},
     BOTH, "grow=regression reuse=regression", "ok", ("ModuleNotFoundError: No module named",)),
    ("crash-with-change", FIXED, {"grow": "pass", "returncode": -11},
     "grow=regression reuse=broken file=broken", "failed",
     (f"2 fail with {CHANGE}: {CLS}.reuse, {FILE_CASE}", "exited -11")),
    ("timeout-with-change", FIXED, {"grow": "pass", "reuse": "pass", "timed_out": True},
     "grow=regression reuse=preservation file=broken", "failed",
     ("timed out (change)", f"timed out with {CHANGE}: {FILE}")),
    ("masked-by-retry", "grow=retry reuse=pass", BOTH, "grow=masked-by-retry reuse=preservation",
     "failed", (f"1 masked by retry on {BASE}: upstream's CI would pass them on the unmodified "
                f"code, failing first and passing on the retry ({CLS}.grow)",)),
    ("flaky", FIXED, "grow=pass reuse=retry", "grow=regression reuse=flaky", "failed",
     (f"1 flaky with {CHANGE}: failed first and passed on a retry",)),
    ("fails-every-attempt", "grow=fails-every-attempt reuse=pass", BOTH,
     "grow=regression reuse=preservation", "ok", ()),
    ("unseen-with-change", FIXED, "grow=pass reuse=unseen", "grow=regression reuse=unproven",
     "failed", ("1 not proven: passed, but the runner could not count",)),
    ("unseen-unmodified", "grow=fail reuse=unseen", BOTH, "grow=regression reuse=unproven",
     "failed", ("1 not proven",)),
    ("expected-failure", FIXED, "grow=pass reuse=expected-failure",
     "grow=regression reuse=preservation", "ok", ()),
    # one id twice: the file is broken, and its failure is never overwritten by the pass
    ("reported-twice", FIXED, {"grow": "pass", "reuse": "fail", "channel": _line("reuse", "pass")},
     "grow=regression reuse=broken file=broken", "failed",
     ("reported more than once: a broken file",)),
    ("bad-channel-line", FIXED, {"grow": "pass", "reuse": "pass", "channel": '{"outcome": 1}\n'},
     "grow=regression reuse=preservation file=broken", "failed",
     ("result line 3: missing field 'test'",)),
]
# fmt: on


@pytest.mark.parametrize("base, change, kinds, verdict, said", [w[1:] for w in WAYS],
                         ids=[w[0] for w in WAYS])  # fmt: skip
def test_the_verdict_kinds_and_reasons_of_each_way_a_run_can_go(base, change, kinds, verdict, said):
    runs = [_side("unmodified", base), _side("change", change)]
    m = judge.build(runs, "cuda", sides(), {FILE: "s"}, [f"{FILE}::*.grow"])
    named = {FILE_CASE: "file"}
    assert [f"{named.get(c.test, c.test.removeprefix(CLS + '.'))}={c.kind}" for c in m.cases] == (
        kinds.split()
    )
    assert m.verdict == verdict and bool(m.reasons) == (verdict != "ok"), m.reasons
    shown = [*m.reasons, *m.files[0].flags, *(r.detail for c in m.cases for r in c.modes.values())]
    for text in said:
        assert any(text in line for line in shown), (text, shown)
    # the report judges a stored run again from its outcomes, whatever kinds it claims
    forged = [replace(c, kind="regression") for c in m.cases]
    assert (
        judge.rejudge(replace(m, verdict="ok", reasons=(), cases=forged), [f"{FILE}::*.grow"]) == m
    )


def test_each_result_comes_from_its_channel_line_and_nothing_from_the_log():
    tests = [("test_grow", "fail", "AssertionError: 160.0", 160.0), ("test_keep", "pass")]
    run = file_run("change", [*tests, ("setUpClass", "skip", "no CUDA device")])
    m = judge.build([replace(run, output="not read\n")], "cuda", sides(), {FILE: "s"})
    grow, keep, skipped = (c.modes["change"] for c in m.cases)
    assert [c.test.removeprefix(CLS) for c in m.cases] == [
        ".test_grow",
        ".test_keep",
        ".setUpClass",
    ]
    assert (grow.outcome, grow.peak_mib, grow.duration_s) == ("fail", 160.0, 0.5)
    assert grow.detail == "AssertionError: 160.0"
    assert (keep.outcome, keep.detail, skipped.detail) == ("pass", "", "no CUDA device")
    assert m.files[0].modes["change"].tests == 3


def test_a_channel_line_that_is_not_a_result_is_an_error_that_names_it():
    text = _line("a", "pass") + '{"test": "T.b", "outcome": "great"}\n[[[\n'
    text += json.dumps({"test": "T.x", "outcome": "pass", "evidence": [1]})
    results, errors = read_channel(text)
    assert [r.test for r in results] == [f"{CLS}.a"]
    assert "result line 2.outcome: 'great' is not one of" in errors[0]
    assert errors[1].startswith("result line 3: ")
    assert "result line 4: unknown field 'evidence'" in errors[2]


def _report(result):
    if result == "absent":
        return None
    outcome = {"retry": "pass", "unseen": "pass"}.get(result, result)
    attempts = ("fail", "pass") if result == "retry" else ()
    return TestResult("T.t", outcome, attempts=attempts, unobserved=result == "unseen")


@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("base", judge.SIDE_RESULTS)
@pytest.mark.parametrize("change", judge.SIDE_RESULTS)
def test_the_truth_table_decides_every_combination_of_the_two_sides(change, base, listed):
    outcomes = {m: r for m, r in (("change", _report(change)), ("unmodified", _report(base))) if r}
    assert judge.side_result(outcomes.get("change")) == change
    kind = judge.kind_of(outcomes, listed)
    assert (kind == "broken") == (change in ("fail", "missing"))
    if kind == "regression":  # the one proof of a fix: fails unmodified, passes with it
        assert base == "fail" and change in ("pass", "absent")
    if kind in ("preservation", "no-baseline"):
        assert change in ("pass", "absent") and not (listed and base in ("pass", "skip", "missing"))


def _change(d):
    return d["cases"][0]["modes"]["change"]


def _wire():
    """The sample's results.json with every optional field set."""
    d = model().to_json()
    d["cases"][0]["line"] = 12
    _change(d)["attempts"] = ["fail", "pass"]
    d["files"][0]["flags"] = ["timed out (change)"]
    for end in d["files"][0]["modes"].values():
        end["log"] = "logs/a"
    for side in d["sides"].values():
        side.update(tree="/t", commit="abcdef0")
    fixes = [{"id": "b" * 64, "patches": ["0001-a.patch", "0002-a-test.patch"]}]
    d["series"] = {"id": "a" * 64, "release": "0.5.23", "patches": ["0001-a.patch"], "fixes": fixes}
    d.update(reasons=["why"], pictures={"k": "pictures/grow.png"})
    return d


def test_results_round_trip_through_json_and_are_frozen(tmp_path):
    m = Results.from_json(_wire())
    save(m, str(tmp_path))
    again = load(str(tmp_path))
    assert again == m and again.to_json() == _wire()
    with pytest.raises(FrozenInstanceError):
        again.verdict = "ok"
    assert isinstance(replace(m, cases=list(m.cases)).cases, tuple)


def _paths(value, where="results.json"):
    """Every place in a results.json below the top, with its name as an error names it."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in items:
        at = f"{where}[{key}]" if isinstance(value, list) else f"{where}.{key}"
        if at.split(".")[2] in ("selection", "environment"):  # free-form records
            continue
        yield (where if where.endswith(".pictures") else at), value, key  # a map checked whole
        if isinstance(child, (dict, list)):
            yield from _paths(child, at)


def test_every_field_of_results_json_refuses_a_value_of_the_wrong_shape_by_name():
    data = _wire()
    places = list(_paths(data))
    assert len(places) > 80
    for at, holder, key in places:
        kept, holder[key] = holder[key], {"?": []}
        with pytest.raises(EvidenceError) as refused:
            Results.from_json(data)
        assert str(refused.value).startswith(at + ":"), (at, str(refused.value))
        holder[key] = kept


def _mutated(tmp_path, mutate):
    data = model().to_json()
    mutate(data)
    (tmp_path / "results.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("cases"), "missing field 'cases'"),
        (lambda d: d["cases"][0].update(sneaky=1), "unknown field 'sneaky'"),
        (lambda d: d.update(schema=99), "schema: 99"),
        (lambda d: _change(d).update(peak_mib=-1), "peak_mib"),
        (lambda d: _change(d).update(test="t" * 501), "501 characters; at most 500"),
        (lambda d: d["cases"][0].update(file="../../etc/passwd.py"), "file: '../../etc/p"),
        (lambda d: d["files"][0].update(suite="base-a-test-cpu\n"), "suite"),
        (lambda d: d["files"][0]["modes"]["change"].update(log="logs/a\n"), "log"),
        (lambda d: d["cases"][0].update(line=10**7), "line"),
        (lambda d: _change(d).update(attempts=["fail"] * 21), "attempts"),
        (lambda d: d["cases"][0].update(modes={"x\n::error::forged": {}}), "modes: .* not one of"),
        (lambda d: d["files"][0]["modes"]["change"].update(returncode=10**400), "returncode: 1000"),
        (lambda d: d["files"][0]["modes"]["change"].update(returncode=True), "True is not an int"),
        (lambda d: _change(d).update(peak_mib=float("nan")), "peak_mib: expected a number"),
        (lambda d: d.update(files=[dict(d["files"][0], suite=f"s{i}") for i in range(51)]), "50"),
        (lambda d: d.update(pictures={"k": "../x.png"}), "pictures"),
        (lambda d: d.update(environment={"a": json.loads("[" * 20 + "]" * 20)}), "nested"),
        (lambda d: d["cases"].append(d["cases"][0]), r"cases\[2\]: .* is listed twice"),
        (lambda d: d["files"].append(d["files"][0]), r"files\[1\]: .* is listed twice"),
        (lambda d: d.update(series={**_wire()["series"], "fixes": [{}] * 101}), "at most 100 it"),
    ],
)
def test_results_out_of_bounds_are_refused_naming_the_field(tmp_path, mutate, message):
    with pytest.raises(EvidenceError, match=message):
        load(str(_mutated(tmp_path, mutate)))


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: p.write_bytes(b"\xff\xfe{}"), "not readable"),
        (lambda p: p.symlink_to("/etc/hostname"), "not a plain file"),
        (lambda p: p.write_text("[" * 100000), "not readable|not JSON"),
        (lambda p: p.write_text('{"schema": 1' + "0" * 5000 + "}"), "not JSON: Exceeds the limit"),
    ],
)
def test_results_that_are_not_a_plain_small_utf8_file_are_refused(tmp_path, write, message):
    write(tmp_path / "results.json")
    with pytest.raises(EvidenceError, match=message):
        load(str(tmp_path))


def test_every_command_in_the_committed_evidence_names_a_module_of_this_repository():
    commands = {
        module
        for path in (REPO / "docs").rglob("*.md")
        for module in re.findall(r"python -m ([A-Za-z_][\w.]*)", path.read_text())
    }
    assert commands, "no command found: the pattern is wrong"
    where = {m: REPO / m.replace(".", "/") for m in commands - {"pip", "pytest", "venv"}}
    assert [
        m for m, p in sorted(where.items()) if not (p.is_dir() or p.with_suffix(".py").exists())
    ] == []
