"""The upstream pull request's description in sglang's template, one per independent fix
(``seriesdir.Fix``: upstream takes one fix per pull request): prose from that fix's own patch
messages, every figure from a ``ci run`` results folder made with that very fix (its recorded
series, or one of the series' recorded fixes, has the fix's id) and only from the tests the fix
adds, nothing else. Pure apart from ``load_results``.

The headings and checklist are those of sglang's ``.github/pull_request_template.md`` as sglang
pull requests opened in 2026 carry them (Motivation, Modifications, Accuracy Tests, Speed Tests
and Profiling, Checklist; read in stored pull request texts): the stored copies of the file
itself, at commits 0a218a4c and b122fb5e, are older.
"""

import re
import shlex
from dataclasses import dataclass, replace

from ci.evidence import judge, shards
from ci.evidence import model as evidence
from ci.reporter.render import cell, environment_line, escape_inline
from tools.series import SeriesError, usage

_PATCH_URL = "https://github.com/sgl-project/sglang/pull/<number>.patch"
DOCS = "https://docs.sglang.io/developer_guide/contribution_guide.html"
CHECKLIST = {  # each "(#anchor)" is a section of DOCS
    "format": "Format your code according to the [Format code with pre-commit]"
    "(#format-code-with-pre-commit).",
    "tests": "Add unit tests according to the [Run and add unit tests](#run-and-add-unit-tests).",
    "docs": "Update documentation according to [Write documentations](#write-documentations).",
    "benchmarks": "Provide accuracy and speed benchmark results according to [Test the accuracy]"
    "(#test-the-accuracy) and [Benchmark the speed](#benchmark-the-speed).",
    "style": "Follow the SGLang code style [guidance](#code-style-guidance).",
}
# Message sections that have a template section of their own.
_OWN = {"motivation", "modifications", "tests"}


@dataclass(frozen=True)
class CheckState:
    """What ``python -m tools.series check`` said, or None when it was not run."""

    passed: bool | None
    detail: str = ""


def message_sections(body: str) -> list:
    """A commit message body as [(heading or "", text)]: a heading is a one-line paragraph
    without a final full stop, followed by its paragraphs."""
    sections, heading, paragraphs = [], "", []
    for paragraph in re.split(r"\n\s*\n", body.strip()):
        lines = paragraph.splitlines()
        if len(lines) == 1 and not lines[0].startswith(" ") and not lines[0].endswith((".", ":")):
            if heading or paragraphs:
                sections.append((heading, paragraphs))
            heading, paragraphs = lines[0].strip(), []
        else:
            paragraphs.append(paragraph)
    if heading or paragraphs:
        sections.append((heading, paragraphs))
    return [(h, "\n\n".join(_markdown(p) for p in ps)) for h, ps in sections]


def _markdown(paragraph: str) -> str:
    """Hard-wrapped prose stays as it is (Markdown joins the lines); an indented block of a
    commit message becomes a fenced block with no language (it may be prose: a list)."""
    lines = paragraph.splitlines()
    if all(line.startswith("  ") for line in lines):
        return "```\n" + "\n".join(line[2:] for line in lines) + "\n```"
    return paragraph


def verify_own_tests(series, results) -> None:
    """A usage error (exit 2) when a file of the results is not a test the series adds: the
    description claims only what the series' own tests showed."""
    added = {path for path, new in series.touched_files().items() if new}
    foreign = sorted({f.path for f in results.files} - added)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise usage(
            f"the results hold {foreign[0]}{more}, which the series does not add; run the "
            f"series' own tests ('python -m ci run --out DIR --tests test/registered') and render "
            f"from that folder"
        )


def verify_series_trees(results) -> None:
    """A usage error (exit 2) unless both sides were the series' own trees: the base, and the
    base with the fix applied (``ci run --unmodified-src/--change-src`` or ``--git-base/
    --git-head``), neither with the runtime overlay. Upstream merges a patch, not an overlay."""
    sides = [(m, results.sides.get(m)) for m in ("unmodified", "change")]
    for mode, side in sorted(sides, key=lambda ms: not (ms[1] is not None and ms[1].overlay)):
        if side is None or side.overlay or not side.tree:
            how = "the runtime overlay" if side is not None and side.overlay else "no source tree"
            raise usage(
                f"the {mode} side of the results ran with {how}; a description is rendered only "
                "from the series' own trees (python -m tools.series ab --fix N --out DIR)"
            )


def verify_plain(results) -> None:
    """A usage error (exit 2) unless ``series ab`` ran both sides from a plain environment
    (sglang without this project), which it records as ``environment.plain``."""
    if results.environment.get("plain") is not True:
        raise usage(
            "the results do not record a plain environment (sglang without this project); "
            "make them with python -m tools.series ab --fix N --out DIR"
        )


def select_fix(series, results, number: str | None = None):
    """The fix the description is for: the one ``number`` names, else the one fix whose tests
    the results hold; a usage error (exit 2) when the results hold none of its tests, or tests
    of several fixes and no ``number`` picks one."""
    verify_series_trees(results)
    verify_plain(results)
    verify_own_tests(series, results)
    ran = {f.path for f in results.files}
    holding = [fix for fix in series.fixes if ran & _added(fix)]
    if number is not None:
        fix = series.fix(number)
        if fix not in holding:
            tests = ", ".join(sorted(_added(fix))) or "none"
            raise usage(f"the results hold no test of fix {fix.number} (its tests: {tests})")
        return fix
    if len(holding) != 1:
        numbers = " and ".join(fix.number for fix in holding) or "no fix"
        raise usage(
            f"the results hold tests of {numbers}; one description per fix: pick it with --fix"
        )
    return holding[0]


def _added(fix) -> set:
    return {path for path, new in fix.touched_files().items() if new}


def own_results(fix, results):
    """``results`` with only the files and cases of the tests ``fix`` adds, judged again: the
    description of one fix quotes no other fix's evidence."""
    added = _added(fix)
    files = tuple(f for f in results.files if f.path in added)
    cases = tuple(c for c in results.cases if c.file in added)
    return judge.with_verdict(replace(results, files=files, cases=cases, pictures={}))


def verify_results_match(series, fix, results, known=None) -> str:
    """The fix's id, which the results record; SeriesError (exit 1) when the results are not
    evidence for this fix: made with other code for it, for another sglang release, or a proof
    that is not ok (the whole run's or that of the fix's own tests)."""
    expected = fix.id
    recorded = results.series
    if recorded is None:
        raise SeriesError(
            "the results record no series id (made outside this project's checkout); "
            "run 'python -m ci run --out DIR' again with this series in patches/"
        )
    if expected not in {recorded.id, *(f.id for f in recorded.fixes)}:
        raise SeriesError(
            f"the results were made for series {recorded.id[:12]} "
            f"({recorded.release}, {', '.join(recorded.patches)}), "
            f"but fix {fix.number} in patches/ is {expected[:12]}; its code changed since that "
            "run. Run 'python -m ci run --out DIR' again and render from the new folder"
        )
    known = known or series.base
    base = results.sides.get("unmodified")
    ran_on = None if base is None else base.sglang
    if ran_on != known.version:
        ran = base.label if base is not None else "no unmodified side"
        raise SeriesError(
            f"the results ran on {ran}, but the base is {known.upstream_name()}; "
            "run the A/B on that base"
        )
    for proof in (results, own_results(fix, results)):
        if proof.verdict != "ok":
            why = "; ".join(proof.reasons) or proof.verdict
            raise SeriesError(f"the results do not prove the change ({proof.verdict}): {why}")
    return expected


def column_labels(known) -> dict:
    """Each mode's name as upstream knows it: the base (``known``, a ``seriesdir.Base``: the
    release, or the upstream commit) and that base with this pull request; never a commit
    materialised here."""
    name = known.upstream_name()
    return {"unmodified": name, "change": f"{name} + this PR"}


def upstream_environment(environment: dict) -> dict:
    """The environment record without what only this project knows: the runtime overlay's
    states and the commit of the checkout ``ci run`` ran from."""
    env = {k: v for k, v in environment.items() if k != "git"}
    modes = env.get("modes")
    if isinstance(modes, dict):
        env["modes"] = {
            m: {k: v for k, v in info.items() if k != "overlay"} if isinstance(info, dict) else info
            for m, info in modes.items()
        }
    return env


def ab_table(results, labels: dict) -> list:
    labels = [escape_inline(labels[m]) for m in ("unmodified", "change")]
    lines = [f"| case | kind | {labels[0]} | {labels[1]} |", "| --- | --- | --- | --- |"]
    for case in results.cases:
        # The runner's peak is the whole process's, not the workspace's growth: not quoted.
        case = replace(case, modes={m: replace(o, peak_mib=None) for m, o in case.modes.items()})
        group, _, test = case.test.rpartition(".")
        device = next((f" ({d})" for d in ("CUDA", "CPU") if group.endswith(d)), "")
        name = f"`{test}`" if re.fullmatch(r"\w+", test) else escape_inline(test)
        cells = (f"{name}{device}", case.kind, cell(case, "unmodified"), cell(case, "change"))
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _counts_sentence(results) -> str:
    counts = {k: v for k, v in results.counts().items() if v}
    parts = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return f"{len(results.cases)} tests on the {results.backend} backend: {parts}."


def _durations(results, labels: dict) -> list:
    return [
        f"- `{f.path}` on {labels.get(mode, mode)}: {end.duration_s:.1f} s, exit {end.returncode}"
        for f in results.files
        for mode, end in ((mode, f.modes.get(mode)) for mode in results.modes)
        if end is not None
    ]


def checklist(fix, results, check: CheckState, labels: dict) -> list:
    adds_test = any(
        new and path.startswith("test/registered/") for path, new in fix.touched_files().items()
    )
    proved = [c for c in results.cases if c.kind == "regression"]
    # Ticked only where the evidence shows it: the hooks ran and passed, the series' own tests
    # proved regressions. No accuracy or speed benchmark is part of the evidence, and no tool
    # checks the style guidance, so those two stay for the author and reviewers.
    state = {
        "format": check.passed is True,
        "tests": adds_test and bool(proved),
        "docs": any(path.startswith("docs/") for path in fix.touched_files()),
        "benchmarks": False,
        "style": False,
    }
    unmodified = labels["unmodified"]
    notes = {
        "format": check.detail,
        "tests": proved and f"{len(proved)} tests fail on {unmodified} and pass with the change",
        "docs": "" if state["docs"] else "no documentation change in these patches",
        "benchmarks": "the evidence holds no accuracy or speed benchmark",
        "style": "no tool checks it: for the reviewers",
    }
    return [
        f"- [{'x' if state[key] else ' '}] {text.replace('](#', f']({DOCS}#')}"
        + (f" ({notes[key]})" if notes.get(key) else "")
        for key, text in CHECKLIST.items()
    ]


def render(series, results, check: CheckState, number=None, known=None) -> str:
    """The whole PR description (Markdown) of one fix: the one ``number`` names, else the one
    whose tests the results hold. ``known``: the base as upstream knows it (a
    ``seriesdir.Base``: a release, or an upstream commit; default patches/BASE)."""
    known = known or series.base
    fix = select_fix(series, results, number)
    verify_results_match(series, fix, results, known)
    results = own_results(fix, results)
    first = fix.patches[0]
    fix_sections = message_sections(first.body)
    motivation = [t for h, t in fix_sections if h.lower() == "motivation"] or [first.subject]
    out = ["## Motivation", "", *motivation, "", "## Modifications", ""]
    for patch in fix.patches:
        out += [f"**{patch.subject}**", ""]
        for heading, text in message_sections(patch.body):
            if heading.lower() == "modifications":
                out += [text, ""]
            elif heading and heading.lower() not in _OWN and patch is first:
                out += [f"*{heading}.*", "", text, ""]
    labels = column_labels(known)
    out += ["## Accuracy Tests", "", _counts_sentence(results), "", *ab_table(results, labels), ""]
    env = upstream_environment(results.environment)
    out += [f"Environment: {environment_line(env, results.backend)}", ""]
    out += [
        "To reproduce, on an sglang checkout (`pr.patch`: this pull request's diff, "
        f"`{_PATCH_URL}`):\n\n```bash",
        *reproduce(known, results),
        "```\n",
    ]
    # The messages' own "Tests" sections stay in the commits: here every claim is the results'.
    out += ["## Speed Tests and Profiling", ""]
    out += [
        "No speed benchmark. Wall time of each test file in this run:\n",
        *_durations(results, labels),
        "",
    ]
    out += ["## Checklist", "", *checklist(fix, results, check, labels), ""]
    return "\n".join(out)


def reproduce(known, results) -> list:
    """Commands that run on an sglang checkout alone: check out the base, add this pull
    request's tests, run each as sglang's CI does (without the fix: it fails), apply the rest
    of the pull request, run them again (with the fix: they pass)."""
    ci = "SGLANG_IS_IN_CI=true " if results.environment.get("upstream_ci") is not None else ""
    runs = [f"PYTHONPATH=python {ci}python3 {shlex.quote(f.path)}" for f in results.files]
    return [
        f"git checkout {known.upstream_revision()}",
        "git apply --include='test/*' pr.patch   # this PR's tests, without the fix",
        *(f"{line}   # fails" for line in runs),
        "git apply --exclude='test/*' pr.patch   # the fix",
        *(f"{line}   # passes" for line in runs),
    ]


def load_results(results_dir: str):
    try:
        return shards.load(results_dir)
    except evidence.EvidenceError as err:
        raise usage(f"cannot read the results: {err}") from None
