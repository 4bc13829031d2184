"""The figures a job's log reports, for the verdict's `results`: trtllm-eval's scores per task
and trtllm-bench's throughput and latency lines. Pure: lines in, a dict out.

Only the shapes the tools print are read, so a number elsewhere in the log never shows up as
a result; a line printed by several ranks counts once (the last wins).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_NUM = r"(-?\d+(?:\.\d+)?)"
# trtllm-eval: `lm-eval gsm8k average accuracy: 75.00`
_LM_EVAL = re.compile(rf"\blm-eval (\S+) average accuracy: {_NUM}")
# trtllm-eval: `MMLU weighted average accuracy: 75.00 (14042)`
_MMLU = re.compile(rf"\bMMLU weighted average accuracy: {_NUM}(?: \((\d+)\))?")
# trtllm-eval cnn_dailymail: `Beam 0 rouge scores:` then `\trouge1: 75.000` lines
_ROUGE_HEAD = re.compile(r"\bBeam (\d+) rouge scores:")
_ROUGE = re.compile(rf"(?:^|\s)(rouge\w*): {_NUM}\s*$")
# trtllm-bench: `Total Output Throughput (tokens/sec):   1600.0000`
_BENCH = re.compile(rf"^((?:[\w-]+ )*[\w-]*(?:Throughput|[Ll]atency)) \(([^)]+)\):\s+{_NUM}\s*$")


def figures(lines: Iterable[str]) -> dict[str, Any]:
    """`{"<task>": {"accuracy": N, ...}, "bench": {"<figure>_<unit>": N, ...}}`; empty when the
    log has none."""
    out: dict[str, dict[str, Any]] = {}
    beam: str | None = None
    for line in lines:
        if m := _LM_EVAL.search(line):
            out.setdefault(m.group(1), {})["accuracy"] = float(m.group(2))
        elif m := _MMLU.search(line):
            mmlu = out.setdefault("mmlu", {})
            mmlu["accuracy"] = float(m.group(1))
            if m.group(2):
                mmlu["samples"] = int(m.group(2))
        elif m := _ROUGE_HEAD.search(line):
            beam = m.group(1)
        elif beam is not None and (m := _ROUGE.search(line)):
            key = m.group(1) if beam == "0" else f"beam{beam}_{m.group(1)}"
            out.setdefault("cnn_dailymail", {})[key] = float(m.group(2))
        elif m := _BENCH.match(line.strip()):
            key = f"{_slug(m.group(1))}_{_slug(m.group(2).replace('/', ' per '))}"
            out.setdefault("bench", {})[key] = float(m.group(3))
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def result_lines(results: dict[str, Any]) -> list[str]:
    """`results` for a person: a line per group of figures, a line per perf-sanity case."""
    lines = []
    for group, values in results.items():
        if group == "perf_sanity":
            for case in values.get("cases", []):
                lines.append(f"results: perf_sanity: {case['case']}: {case['outcome']}")
                for c in case.get("clients", []):
                    shown = _shown(
                        {k: v for k, v in c.items() if k not in ("server", "client", "log")}
                    )
                    lines.append(f"  client {c['server']}.{c['client']}: {shown or 'no figures'}")
            continue
        lines.append(f"results: {group}: {_shown(values)}")
    return lines


def _shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in values.items() if isinstance(v, (int, float)))
