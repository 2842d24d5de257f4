"""One fix's upstream PR description in sglang's template: prose from its patch messages, every
figure from a ``ci run`` folder made with that very fix, of the tests it adds alone."""

import re
import shlex
from collections import namedtuple
from dataclasses import replace

from ci.evidence import judge
from ci.reporter.escape import escape_inline
from ci.reporter.render import cell, environment_line
from tools.series import SeriesError, usage

_PATCH_URL = "https://github.com/sgl-project/sglang/pull/<number>.patch"
DOCS = "https://docs.sglang.io/developer_guide/contribution_guide.html"
_OWN = {"motivation", "modifications", "tests"}  # message sections with a template section


# What ``python -m tools.series check`` said; ``passed`` None when it was not run.
CheckState = namedtuple("CheckState", "passed detail")


def message_sections(body: str) -> list:
    """A message body as [(heading or "", markdown)]: a heading is a one-line paragraph without
    a final full stop; an indented block becomes a fenced block."""
    sections = []
    for paragraph in re.split(r"\n\s*\n", body.strip()):
        lines = paragraph.splitlines()
        if len(lines) == 1 and not lines[0].startswith(" ") and not lines[0].endswith((".", ":")):
            sections.append((lines[0].strip(), []))
            continue
        if all(line.startswith("  ") for line in lines):
            paragraph = "```\n" + "\n".join(line[2:] for line in lines) + "\n```"
        if not sections:
            sections.append(("", []))
        sections[-1][1].append(paragraph)
    return [(heading, "\n\n".join(paragraphs)) for heading, paragraphs in sections]


def select_fix(series, results):
    """The one fix whose tests the results hold; refused (exit 2) for results not made by
    ``series ab`` (its plain trees: the base release, no overlay; one fix's own tests), and
    (exit 1) when they are no evidence for that fix: other code or release (the ids hash both),
    or a proof that is not ok."""
    if results.environment.get("plain") is not True:
        raise usage(
            "the results do not record a plain environment (sglang without this project); "
            "make them with python -m tools.series ab --fix N --out DIR"
        )
    ran = {f.path for f in results.files}
    holding = [fix for fix in series.fixes if ran & fix.added_files()]
    if len(holding) != 1:
        numbers = " and ".join(fix.number for fix in holding) or "no fix"
        raise usage(
            f"the results hold tests of {numbers}; one description per fix: "
            "make its results with python -m tools.series ab --fix N --out DIR"
        )
    fix = holding[0]
    recorded = results.series
    if recorded is None:
        raise SeriesError(
            "the results record no series id (made outside this project's checkout); "
            "run 'python -m ci run --out DIR' again with this series in patches/"
        )
    if fix.id not in {recorded.id, *(f.id for f in recorded.fixes)}:
        raise SeriesError(
            f"the results were made for series {recorded.id[:12]} "
            f"({recorded.release}, {', '.join(recorded.patches)}), "
            f"but fix {fix.number} in patches/ is {fix.id[:12]}; its code changed since that "
            "run. Run 'python -m ci run --out DIR' again and render from the new folder"
        )
    for proof in (results, own_results(fix, results)):
        if proof.verdict != "ok":
            why = "; ".join(proof.reasons) or proof.verdict
            raise SeriesError(f"the results do not prove the change ({proof.verdict}): {why}")
    return fix


def own_results(fix, results):
    """``results`` with only the files and cases of ``fix``'s tests, judged again."""
    added = fix.added_files()
    files = tuple(f for f in results.files if f.path in added)
    cases = tuple(c for c in results.cases if c.file in added)
    return judge.with_verdict(replace(results, files=files, cases=cases, pictures={}))


def ab_table(results, labels: dict) -> list:
    head = " | ".join(escape_inline(labels[m]) for m in ("unmodified", "change"))
    lines = [f"| case | kind | {head} |", "| --- | --- | --- | --- |"]
    for case in results.cases:
        # The runner's peak is the whole process's, not the workspace's growth: not quoted.
        case = replace(case, modes={m: replace(o, peak_mib=None) for m, o in case.modes.items()})
        group, _, test = case.test.rpartition(".")
        device = next((f" ({d})" for d in ("CUDA", "CPU") if group.endswith(d)), "")
        name = f"`{test}`" if re.fullmatch(r"\w+", test) else escape_inline(test)
        cells = (f"{name}{device}", case.kind, cell(case, "unmodified"), cell(case, "change"))
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def checklist(fix, results, check: CheckState, labels: dict) -> list:
    """sglang's checklist, ticked only where the evidence shows it (never benchmarks and style)."""
    touched = fix.touched_files()
    proved = [c for c in results.cases if c.kind == "regression"]
    adds_tests = any(new and p.startswith("test/registered/") for p, new in touched.items())
    docs = any(path.startswith("docs/") for path in touched)
    rows = [  # (ticked, the template's line, each "(#anchor)" a section of DOCS; what shows it)
        (check.passed is True, "Format your code according to the [Format code with pre-commit]"
         "(#format-code-with-pre-commit).", check.detail),
        (adds_tests and bool(proved),
         "Add unit tests according to the [Run and add unit tests](#run-and-add-unit-tests).",
         proved and f"{len(proved)} tests fail on {labels['unmodified']} and pass with the change"),
        (docs, "Update documentation according to [Write documentations](#write-documentations).",
         "" if docs else "no documentation change in these patches"),
        (False, "Provide accuracy and speed benchmark results according to [Test the accuracy]"
         "(#test-the-accuracy) and [Benchmark the speed](#benchmark-the-speed).",
         "the evidence holds no accuracy or speed benchmark"),
        (False, "Follow the SGLang code style [guidance](#code-style-guidance).",
         "no tool checks it: for the reviewers"),
    ]  # fmt: skip
    return [
        f"- [{'x' if ticked else ' '}] {text.replace('](#', f']({DOCS}#')}"
        + (f" ({note})" if note else "")
        for ticked, text, note in rows
    ]


def render(series, results, check: CheckState, fix) -> str:
    """The description (Markdown) of ``fix``, from results ``select_fix`` accepts for it."""
    results = own_results(fix, results)
    first = fix.patches[0]
    motivation = [t for h, t in message_sections(first.body) if h.lower() == "motivation"]
    out = ["## Motivation", "", *(motivation or [first.subject]), "", "## Modifications", ""]
    for patch in fix.patches:
        out += [f"**{patch.subject}**", ""]
        for heading, text in message_sections(patch.body):
            if heading.lower() == "modifications":
                out += [text, ""]
            elif heading and heading.lower() not in _OWN and patch is first:
                out += [f"*{heading}.*", "", text, ""]
    name = f"sglang {series.base.version}"
    labels = {"unmodified": name, "change": f"{name} + this PR"}
    counts = ", ".join(f"{n} {kind}" for kind, n in results.counts().items() if n)
    env = environment_line(results.environment, results.backend)  # no overlay, no commit
    out += [
        "## Accuracy Tests", "",
        f"{len(results.cases)} tests on the {results.backend} backend: {counts}.", "",
        *ab_table(results, labels), "",
        f"Environment: {env}", "",
        "To reproduce, on an sglang checkout (`pr.patch`: this pull request's diff, "
        f"`{_PATCH_URL}`):\n\n```bash",
        *reproduce(series.base.version, results),
        "```\n",
        # The messages' own "Tests" sections stay in the commits: every claim is the results'.
        "## Speed Tests and Profiling", "",
        "No speed benchmark. Wall time of each test file in this run:\n",
        *(
            f"- `{f.path}` on {labels.get(mode, mode)}: {end.duration_s:.1f} s, exit {end.returncode}"
            for f in results.files
            for mode, end in ((mode, f.modes.get(mode)) for mode in results.modes)
            if end is not None
        ),
        "",
        "## Checklist", "",
        *checklist(fix, results, check, labels), "",
    ]  # fmt: skip
    return "\n".join(out)


def reproduce(version: str, results) -> list:
    """On an sglang checkout alone: the base, this PR's tests (they fail), the fix (they pass)."""
    ci = "SGLANG_IS_IN_CI=true " if results.environment.get("upstream_ci") is not None else ""
    runs = [f"PYTHONPATH=python {ci}python3 {shlex.quote(f.path)}" for f in results.files]
    return [
        f"git checkout v{version}",
        "git apply --include='test/*' pr.patch   # this PR's tests, without the fix",
        *(f"{line}   # fails" for line in runs),
        "git apply --exclude='test/*' pr.patch   # the fix",
        *(f"{line}   # passes" for line in runs),
    ]
