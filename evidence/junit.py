"""One JUnit XML file per mode from the evidence (serialising only; the verdicts are
``evidence.judge``'s): each test file a testsuite, each test a testcase.
"""

import os
import xml.etree.ElementTree as ET
from collections import Counter

from evidence.model import Results

# XML 1.0 cannot carry most control characters, which do turn up in test logs, nor lone
# surrogates (JSON's "\ud800" on a result channel decodes to one) or U+FFFE and U+FFFF.
_XML_SAFE = dict.fromkeys(
    [c for c in range(32) if c not in (9, 10, 13)] + [*range(0xD800, 0xE000), 0xFFFE, 0xFFFF]
)


def write(results: Results, out_dir: str) -> list[str]:
    written = []
    for mode in results.modes:
        path = os.path.join(out_dir, f"junit-{mode}.xml")
        ET.ElementTree(_mode_tree(results, mode)).write(
            path, encoding="utf-8", xml_declaration=True
        )
        written.append(path)
    return written


def _clean(text) -> str:
    return str(text or "").translate(_XML_SAFE)


def _mode_tree(results: Results, mode: str) -> ET.Element:
    root = ET.Element("testsuites", name=_clean(f"{results.label(mode)} ({results.backend})"))
    for file in results.files:
        cases = [c for c in results.cases if c.file == file.path and mode in c.modes]
        counts = Counter(case.modes[mode].outcome for case in cases)
        end = file.modes.get(mode)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_clean(file.path),
            tests=str(len(cases)),
            failures=str(counts["fail"]),
            errors=str(counts["error"] + counts["missing"]),
            skipped=str(counts["skip"]),
            time=f"{end.duration_s if end else 0:.3f}",
        )
        for case in cases:
            outcome = case.modes[mode]
            classname, _, name = case.test.split("[", 1)[0].rpartition(".")
            name = case.test[len(classname) + 1 :] if classname else case.test
            element = ET.SubElement(
                suite,
                "testcase",
                classname=_clean(f"{file.path}::{classname}" if classname else file.path),
                name=_clean(name),
                time=f"{outcome.duration_s or 0:.3f}",
            )
            detail = _clean(outcome.detail)
            message = (detail.strip().splitlines() or [outcome.outcome])[-1][:500]
            if outcome.outcome == "fail":
                ET.SubElement(element, "failure", message=message).text = detail
            elif outcome.outcome in ("error", "missing"):
                ET.SubElement(element, "error", message=message).text = detail
            elif outcome.outcome == "skip":
                ET.SubElement(element, "skipped", message=message)
            if outcome.peak_mib is not None:
                props = ET.SubElement(element, "properties")
                ET.SubElement(
                    props, "property", name="peak_allocated_mib", value=str(outcome.peak_mib)
                )
    return root
