"""One JUnit XML file per mode: each test file a testsuite, each test a testcase."""

import os
import xml.etree.ElementTree as ET
from collections import Counter

from ci.evidence.model import Results

# What XML 1.0 cannot carry: most control characters, lone surrogates, U+FFFE, U+FFFF.
_XML_SAFE = dict.fromkeys({*range(32), *range(0xD800, 0xE000), 0xFFFE, 0xFFFF} - {9, 10, 13})
# The element a test's outcome adds to its testcase (a skip's carries no text).
_TAGS = {"fail": "failure", "error": "error", "missing": "error", "skip": "skipped"}
_COUNTS = {"failures": "failure", "errors": "error", "skipped": "skipped"}  # testsuite's
_RETRIED = {
    "unmodified": "masked by retry: failed at first, passed on the retry; upstream's CI would "
    "pass this test on the unmodified code",
    "change": "flaky: failed at first with the change, passed on the retry",
}


def write(results: Results, out_dir: str) -> list[str]:
    paths = [os.path.join(out_dir, f"junit-{mode}.xml") for mode in results.modes]
    for mode, path in zip(results.modes, paths, strict=True):
        ET.ElementTree(_mode_tree(results, mode)).write(path, "utf-8", xml_declaration=True)
    return paths


def _clean(text) -> str:
    return str(text or "").translate(_XML_SAFE)


def _mode_tree(results: Results, mode: str) -> ET.Element:
    root = ET.Element("testsuites", name=_clean(f"{results.label(mode)} ({results.backend})"))
    for file in results.files:
        cases = [c for c in results.cases if c.file == file.path and mode in c.modes]
        tags = Counter(_TAGS.get(case.modes[mode].outcome) for case in cases)
        end = file.modes.get(mode)
        suite = ET.SubElement(root, "testsuite", name=_clean(file.path), tests=str(len(cases)))
        for attribute, tag in _COUNTS.items():
            suite.set(attribute, str(tags[tag]))
        suite.set("time", f"{end.duration_s if end else 0:.3f}")
        for case in cases:
            outcome = case.modes[mode]
            classname, _, name = case.test.split("[", 1)[0].rpartition(".")
            name = _clean(case.test[len(classname) + 1 :] if classname else case.test)
            where = _clean(f"{file.path}::{classname}" if classname else file.path)
            time = f"{outcome.duration_s or 0:.3f}"
            element = ET.SubElement(suite, "testcase", classname=where, name=name, time=time)
            detail = _clean(outcome.detail)
            message = (detail.strip().splitlines() or [outcome.outcome])[-1][:500]
            tag = _TAGS.get(outcome.outcome)
            if tag is not None:
                failure = ET.SubElement(element, tag, message=message)
                failure.text = None if tag == "skipped" else detail
            if outcome.passed_on_retry:  # Surefire's element for it
                retried = ET.SubElement(element, "flakyFailure", message=_RETRIED[mode])
                retried.text = detail
            properties = {}
            if outcome.peak_mib is not None:
                properties["peak_allocated_mib"] = str(outcome.peak_mib)
            if len(outcome.attempts) > 1 or outcome.unproven:
                seen = "not seen" if outcome.unproven else ",".join(outcome.attempts)
                properties["attempts"] = seen
            holder = ET.SubElement(element, "properties") if properties else None
            for key, value in properties.items():
                ET.SubElement(holder, "property", name=key, value=value)
    return root
