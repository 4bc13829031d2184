"""Perf-sanity test ids: find the ``test_e2e[...]`` selection in a command or test-list line.

The bracket text ("label") is split on ``-`` the way the repo's submit.py splits it:

* ``<aggr|aggr_upload>-<config_base>[-<server name>]``: aggregated; only the second label is
  the config base (aggregated config file names carry no ``-``), the rest is the server name;
* ``<disagg|disagg_upload>-<e2e|gen_only>[-time_breakdown]-<config_base>``: disaggregated;
* ``<aggr|aggr_upload>-ctx_only[-time_breakdown]-<config_base>`` and
  ``<aggr|aggr_upload>-gen_only_no_context-<config_base>``: run on the aggregated path but
  read the *disaggregated* config ``<config_base>``.

``time_breakdown`` exists for e2e and ctx_only only (TRT-LLM `jenkins/scripts/perf/local/
submit.py` at 38008eab7368767721de3591af09194d0928fb64, `parse_test_string`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from trtllm_script_builder.errors import BuildError

PerfKind = Literal["aggr", "disagg", "ctx_only", "gen_only_no_context"]

PERF_TEST_FILE = "perf/test_perf_sanity.py"
PERF_TEST_FUNCTION = "test_e2e"
AGG_PREFIXES = ("aggr", "aggr_upload")
DISAGG_PREFIXES = ("disagg", "disagg_upload")
DISAGG_MODES = ("e2e", "gen_only")
CTX_ONLY = "ctx_only"
GEN_ONLY_NO_CONTEXT = "gen_only_no_context"
AGG_PATH_DISAGG_MODES = (CTX_ONLY, GEN_ONLY_NO_CONTEXT)  # disaggregated config, aggregated run
TIME_BREAKDOWN = "time_breakdown"
TIME_BREAKDOWN_MODES = ("e2e", CTX_ONLY)

# The suffix a test-list line may carry (minutes); submit.py strips exactly this.
TIMEOUT_SUFFIX_RE = re.compile(r"\s+TIMEOUT\s*\(\d+\)\s*$", re.I)
_TIMEOUT_VALUE_RE = re.compile(r"\s+TIMEOUT\s*\((\d+)\)\s*$", re.I)
# A shell / YAML comment that follows the id on the same line.
_TRAILING_COMMENT_RE = re.compile(r"\s+#.*$")
# `test_e2e[<label>]`; the label never holds brackets, blanks or quotes.
_BRACKET_RE = re.compile(re.escape(PERF_TEST_FUNCTION) + r"\[([^\[\]\s'\"]*)\]")
# A bare label as a `-k` expression: `-k "aggr-cfg-server"`.
_BARE_LABEL_RE = re.compile(
    r"^(?:" + "|".join(re.escape(p) for p in AGG_PREFIXES + DISAGG_PREFIXES) + r")-\S+$"
)


@dataclass(frozen=True)
class PerfTestId:
    """One perf-sanity selection, as submit.py understands it."""

    raw_id: str  # perf/test_perf_sanity.py::test_e2e[<label>], without any TIMEOUT suffix
    prefix: str  # aggr, aggr_upload, disagg, disagg_upload
    kind: PerfKind
    config_base: str
    server_name: str | None  # aggregated only
    mode: str | None  # e2e|gen_only (disagg), ctx_only|gen_only_no_context, None (aggregated)
    timeout_minutes: int | None
    time_breakdown: bool = False

    @property
    def label(self) -> str:
        """The text inside the brackets."""
        return self.raw_id[self.raw_id.index("[") + 1 : -1]

    @property
    def uploads(self) -> bool:
        """`_upload` ids send results to the database in CI; submit.py drops the suffix."""
        return self.prefix.endswith("_upload")

    @property
    def config_folder(self) -> Literal["aggregated", "disaggregated"]:
        """The folder under tests/scripts/perf-sanity/ that holds the config."""
        return "aggregated" if self.kind == "aggr" else "disaggregated"

    @property
    def test_list_id(self) -> str:
        """The id submit.py writes to test_list.txt: the `_upload` part of the prefix dropped."""
        base = "disagg" if self.kind == "disagg" else "aggr"
        middle = [self.mode] if self.mode else []
        middle += [TIME_BREAKDOWN] if self.time_breakdown else []
        tail = [self.server_name] if self.server_name else []
        label = "-".join([base, *middle, self.config_base, *tail])
        return f"{PERF_TEST_FILE}::{PERF_TEST_FUNCTION}[{label}]"


def is_perf_sanity_cmd(test_cmd: str) -> bool:
    """True when a pytest command / test-list line is a perf-sanity selection."""
    return (
        PERF_TEST_FILE in test_cmd or "perf-sanity" in test_cmd or "test_perf_sanity.py" in test_cmd
    )


def strip_timeout(text: str) -> tuple[str, int | None]:
    """Split a trailing ` TIMEOUT (N)` off a test-list line; N is in minutes."""
    match = _TIMEOUT_VALUE_RE.search(text)
    if match is None:
        return text, None
    digits = match.group(1)
    # int() refuses thousands of digits with a ValueError; any number this long is absurd as
    # minutes, and callers bound it, so it stands as the largest number they can be told.
    return text[: match.start()], int(digits) if len(digits) <= 18 else 10**18


def _k_expressions(text: str) -> list[str]:
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    found: list[str] = []
    for i, word in enumerate(words):
        if word in ("-k", "--keyword") and i + 1 < len(words):
            found.append(words[i + 1])
        elif word.startswith("-k") and len(word) > 2 and not word.startswith("--"):
            found.append(word[2:].lstrip("="))
        elif word.startswith("--keyword="):
            found.append(word[len("--keyword=") :])
    return found


def _labels(text: str) -> list[str]:
    labels = _BRACKET_RE.findall(text)
    if not labels:
        labels = [e.strip() for e in _k_expressions(text) if _BARE_LABEL_RE.match(e.strip())]
    # Keep the order, drop repeats: the same id given twice is one selection.
    return list(dict.fromkeys(labels))


def _stem(parts: list[str], label: str, prefix: str, mode: str, field: str) -> tuple[bool, str]:
    """The optional `time_breakdown` segment and the config base after the mode."""
    breakdown = bool(parts) and parts[0] == TIME_BREAKDOWN
    rest = parts[1:] if breakdown else parts
    if not rest or not all(rest):
        raise BuildError(
            field,
            f"perf-sanity id {label!r} names no disaggregated config after '{prefix}-{mode}'",
            f"use '{prefix}-{mode}-<config base name>'",
        )
    if breakdown and mode not in TIME_BREAKDOWN_MODES:
        raise BuildError(
            field,
            f"perf-sanity id {label!r}: {TIME_BREAKDOWN} exists for "
            f"{' and '.join(TIME_BREAKDOWN_MODES)} only, not {mode}",
            f"drop '{TIME_BREAKDOWN}-' from the id",
        )
    return breakdown, "-".join(rest)


def parse_label(
    label: str, *, timeout_minutes: int | None = None, field: str = "test_cmd"
) -> PerfTestId:
    """Turn the bracket text of a perf-sanity id into a PerfTestId."""
    parts = label.split("-")
    prefix = parts[0]
    raw_id = f"{PERF_TEST_FILE}::{PERF_TEST_FUNCTION}[{label}]"
    known = ", ".join(AGG_PREFIXES + DISAGG_PREFIXES)
    if prefix in DISAGG_PREFIXES:
        if len(parts) < 3 or parts[1] not in DISAGG_MODES:
            raise BuildError(
                field,
                f"disaggregated perf-sanity id {label!r} is not '{prefix}-<e2e|gen_only>-<config>'",
                "name the mode (e2e or gen_only) and the disaggregated config base name, "
                f"e.g. {prefix}-e2e-<config>",
            )
        breakdown, base = _stem(parts[2:], label, prefix, parts[1], field)
        return PerfTestId(
            raw_id, prefix, "disagg", base, None, parts[1], timeout_minutes, breakdown
        )
    if prefix in AGG_PREFIXES:
        if len(parts) >= 2 and parts[1] in AGG_PATH_DISAGG_MODES:
            mode = parts[1]
            breakdown, base = _stem(parts[2:], label, prefix, mode, field)
            kind: PerfKind = "ctx_only" if mode == CTX_ONLY else "gen_only_no_context"
            return PerfTestId(raw_id, prefix, kind, base, None, mode, timeout_minutes, breakdown)
        if len(parts) < 2 or not parts[1]:
            raise BuildError(
                field,
                f"aggregated perf-sanity id {label!r} names no config",
                f"use '{prefix}-<config base name>-<server config name>'",
            )
        server = "-".join(parts[2:]) or None
        return PerfTestId(raw_id, prefix, "aggr", parts[1], server, None, timeout_minutes)
    raise BuildError(
        field,
        f"perf-sanity id {label!r} starts with {prefix!r}, not one of {known}",
        "use an id of the form test_e2e[<aggr|aggr_upload|disagg|disagg_upload>-...] "
        "as listed in tests/integration/test_lists/test-db",
    )


def parse_perf_test_id(text: str, *, field: str = "test_cmd") -> PerfTestId:
    """Find the one perf-sanity selection in a pytest command or a test-list line.

    Accepts `perf/test_perf_sanity.py::test_e2e[...]` (optionally with ` TIMEOUT (N)`),
    `pytest .../perf/test_perf_sanity.py -v "test_e2e[...]"`, `... -k "test_e2e[...]"` and
    `... -k "aggr-cfg-server"`. Raises BuildError (on `field`) when there is none, several, or
    the label is malformed.
    """
    stripped = text.strip()
    if stripped.lstrip("- ").startswith("#"):
        raise BuildError(
            field,
            f"the perf-sanity line is commented out: {stripped!r}",
            "remove the leading '#' or pick a line that is not commented out",
        )
    body = _TRAILING_COMMENT_RE.sub("", stripped)
    body, timeout = strip_timeout(body)
    labels = _labels(body)
    if not labels:
        raise BuildError(
            field,
            f"no perf-sanity selection test_e2e[...] found in {stripped!r}",
            "select one case, e.g. perf/test_perf_sanity.py::test_e2e[aggr-<config>-<server>] "
            'or pytest .../perf/test_perf_sanity.py -v "test_e2e[...]"',
        )
    if len(labels) > 1:
        raise BuildError(
            field,
            f"{len(labels)} perf-sanity selections found ({', '.join(labels)})",
            "submit.py runs one case per job: give one test_e2e[...] id",
        )
    return parse_label(labels[0], timeout_minutes=timeout, field=field)
