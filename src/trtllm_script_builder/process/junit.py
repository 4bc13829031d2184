"""Per-test results of a pytest run: from its JUnit XML file, or from its summary line when the
job died before pytest wrote the file. Pure: bytes and lines in, a `TestReport` out.

The XML comes from a job, so it is read as untrusted: a document with a DTD (the door to entity
expansion and external entities) is refused before the tree is built, found by expat itself in
whatever encoding the document declares (UTF-16 and UTF-32 hide a `<!DOCTYPE` from a byte
search), and Python's expat parser then refuses any entity it does not know. Test ids and
messages are kept with their control characters escaped (decision shown-never-obeyed).
"""

from __future__ import annotations

import contextlib
import re
import xml.etree.ElementTree as ET
import xml.parsers.expat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trtllm_script_builder.model.values import printable

MAX_IDS = 50  # failing or skipped tests named in a verdict; the counts stay exact
MAX_MESSAGE = 300  # characters of one test's message

_DTD_REFUSED = "the file declares a DTD or entities; refused"


class JUnitError(ValueError):
    """The file is not a JUnit report this reader accepts."""


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest test class, despite the name

    id: str
    message: str

    def show(self) -> str:
        return f"{self.id}: {self.message}" if self.message else self.id


@dataclass
class TestReport:
    """Counts, and the tests that failed (failures and errors) or were skipped."""

    __test__ = False

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failing: list[TestOutcome] = field(default_factory=list)
    skipped_tests: list[TestOutcome] = field(default_factory=list)
    source: str = ""  # the JUnit file's name, or "summary line"

    @property
    def nothing_ran(self) -> bool:
        """No test passed and none failed: all skipped, none collected, an empty selection."""
        return self.passed == 0 and self.failed == 0 and self.errors == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
            "failing": [{"id": t.id, "message": t.message} for t in self.failing],
            "skipped_tests": [{"id": t.id, "message": t.message} for t in self.skipped_tests],
        }


def parse_junit(data: bytes, source: str = "") -> TestReport:
    """Read a JUnit XML report (pytest's `--junitxml`); JUnitError when it is refused."""
    return report_of(junit_root(data), source)


def junit_root(data: bytes) -> ET.Element:
    """The root element of a JUnit XML report; JUnitError when it declares a DTD or entities,
    is not well-formed, or is no <testsuites>/<testsuite>."""
    _refuse_dtd(data)
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise JUnitError(f"not well-formed XML: {e}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"root element <{root.tag}> is not <testsuites> or <testsuite>")
    return root


def _refuse_dtd(data: bytes) -> None:
    """JUnitError when expat meets a document type declaration or an entity declaration;
    a document that is not well-formed is left to the tree builder's own message."""

    def refuse(*_: Any) -> None:
        raise JUnitError(_DTD_REFUSED)

    parser = xml.parsers.expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    with contextlib.suppress(xml.parsers.expat.ExpatError):
        parser.Parse(data, True)


def report_of(root: ET.Element, source: str = "") -> TestReport:
    """The counts and outcomes of a report's test cases (`root` from `junit_root`)."""
    report = TestReport(source=source)
    for case in root.iter("testcase"):
        tid = node_id(case.get("classname", ""), case.get("name", ""))
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        # pytest reports an error in teardown next to the test's own result: count both.
        if failure is not None:
            report.failed += 1
            _add(report.failing, tid, failure)
        if error is not None:
            report.errors += 1
            _add(report.failing, tid, error)
        if skipped is not None:
            report.skipped += 1
            _add(report.skipped_tests, tid, skipped)
        elif failure is None and error is None:
            report.passed += 1
    return report


def node_id(classname: str, name: str) -> str:
    """pytest's node id from JUnit's `classname` (dotted module path, then classes) and `name`:
    `accuracy.test_x.TestA` + `test_b[tp4]` -> `accuracy/test_x.py::TestA::test_b[tp4]`.
    Classes are told from modules by their capital letter, as test classes are named."""
    if not classname:
        return name
    parts = classname.split(".")
    n = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    if n == 0:
        return "::".join([*parts, name])
    return "::".join(["/".join(parts[:n]) + ".py", *parts[n:], name])


def _add(out: list[TestOutcome], tid: str, el: ET.Element) -> None:
    if len(out) < MAX_IDS:
        out.append(TestOutcome(printable(tid), message(el)))


def message(el: ET.Element | None) -> str:
    """A failure's, error's or skip's message on one line, cut at MAX_MESSAGE characters."""
    if el is None:
        return ""
    text = el.get("message") or (el.text or "")
    text = " ".join(text.split())
    text = text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
    return printable(text)


# ---------------------------------------------------------------- pytest's summary line

# `==== 1 passed, 2 skipped in 0.12s ====`, `no tests ran in 0.01s`, and -q's bare form.
_SUMMARY = re.compile(
    r"^=*\s*((?:no tests ran|\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|"
    r"warnings?|rerun))(?:, \d+ \w+)*) in [\d.]+s\b"
)  # what follows (` (0:00:01) ====`) is not read: `.*?=*$` was quadratic in a line of `=`
# At most 18 digits: a longer count is no count (Python refuses to convert 4300 digits).
_COUNT = re.compile(r"(?<!\d)(\d{1,18}) (\w+)")


def summary_report(lines: Iterable[str]) -> tuple[TestReport, int] | None:
    """The counts of pytest's last summary line, and its index; None when there is none."""
    found: tuple[TestReport, int] | None = None
    for i, line in enumerate(lines):
        m = _SUMMARY.match(line.strip())
        if not m:
            continue
        report = TestReport(source="summary line")
        for count, word in _COUNT.findall(m.group(1)):
            if word == "passed" or word == "xpassed":
                report.passed += int(count)
            elif word == "failed":
                report.failed += int(count)
            elif word.startswith("error"):
                report.errors += int(count)
            elif word in ("skipped", "xfailed"):
                report.skipped += int(count)
        found = report, i
    return found
