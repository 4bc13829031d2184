"""The figures a job's log reports, for the verdict's `results`: trtllm-eval's scores per task,
the reference and threshold of TensorRT-LLM's accuracy tests, and each workflow's own figure
lines (trtllm-bench's throughput and latency), under the workflow's results group. Pure:
lines in, a dict out.

Only the shapes the tools print are read, so a number elsewhere in the log never shows up as
a result; a line printed by several ranks counts once (the last wins).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from trtllm_script_builder.resolve.workflow import NUM, workflows

# trtllm-eval: `lm-eval gsm8k average accuracy: 75.00`
_LM_EVAL = re.compile(rf"\blm-eval (\S+) average accuracy: {NUM}")
# trtllm-eval: `MMLU weighted average accuracy: 75.00 (14042)`
_MMLU = re.compile(rf"\bMMLU weighted average accuracy: {NUM}(?: \((\d{{1,18}})\))?")
# trtllm-eval cnn_dailymail: `Beam 0 rouge scores:` then `\trouge1: 75.000` lines
_ROUGE_HEAD = re.compile(r"\bBeam (\d+) rouge scores:")
_ROUGE = re.compile(rf"(?:^|\s)(rouge\w*): {NUM}\s*$")
# TensorRT-LLM's accuracy tests log a hypothesis-testing report after the task's score line:
# `Higher is better: True`, `Reference accuracy: 74.000`, `Threshold: 72.123`,
# `Evaluated accuracy: 75.000` (the metric is the task's, e.g. `WER`); decision eval-thresholds.
_HEAD = re.compile(r"^= \w+ HYPOTHESIS TESTING\s*$")
_HIGHER = re.compile(r"(?:^|\s)Higher is better: (True|False)\s*$")
_REFERENCE = re.compile(rf"(?:^|\s)Reference (\w+): {NUM}\s*$")
_THRESHOLD = re.compile(rf"(?:^|\s)Threshold: {NUM}\s*$")
_EVALUATED = re.compile(rf"(?:^|\s)Evaluated (\w+): {NUM}\s*$")


def figures(lines: Iterable[str]) -> dict[str, Any]:
    """`{"<task>": {"accuracy": N, ...}, "<workflow group>": {"<figure>": N, ...}}`; empty
    when the log has none."""
    by_workflow = [(wf.results, wf.figure) for wf in workflows() if wf.results and wf.figure]
    out: dict[str, dict[str, Any]] = {}
    beam: str | None = None
    task: str | None = None  # the last task a score line named: a report below is its
    test: _Report | None = None  # a hypothesis-testing report being read
    for line in lines:
        if m := _LM_EVAL.search(line):
            task = m.group(1)
            out.setdefault(task, {})["accuracy"] = float(m.group(2))
        elif m := _MMLU.search(line):
            task = "mmlu"
            mmlu = out.setdefault("mmlu", {})
            mmlu["accuracy"] = float(m.group(1))
            if m.group(2):
                mmlu["samples"] = int(m.group(2))
        elif m := _ROUGE_HEAD.search(line):
            beam, task = m.group(1), "cnn_dailymail"
        elif beam is not None and (m := _ROUGE.search(line)):
            key = m.group(1) if beam == "0" else f"beam{beam}_{m.group(1)}"
            out.setdefault("cnn_dailymail", {})[key] = float(m.group(2))
        elif hit := _own_figure(line, by_workflow):
            group, key, value = hit
            out.setdefault(group, {})[key] = value
        elif _HEAD.match(_message(line)):
            test = _Report()
        elif test is None:
            continue
        elif m := _HIGHER.search(line):
            test.higher = m.group(1) == "True"
        elif m := _REFERENCE.search(line):
            test.metric, test.reference = m.group(1).lower(), float(m.group(2))
        elif m := _THRESHOLD.search(line):
            test.threshold = float(m.group(1))
        elif (m := _EVALUATED.search(line)) and test.metric and test.threshold is not None:
            # the report names no task: it is the last scored task's when that task has the
            # metric and no report yet, else a task named after the metric (e.g. `wer`)
            own = out.get(task or "", {})
            mine = test.metric in own and f"{test.metric}_threshold" not in own
            test.add_to(
                out.setdefault(task if mine and task else test.metric, {}), float(m.group(2))
            )
            test = None
    return out


def _own_figure(
    line: str, own: list[tuple[str, Callable[[str], tuple[str, float] | None]]]
) -> tuple[str, str, float] | None:
    for group, figure in own:
        if found := figure(line):
            return group, *found
    return None


def _message(line: str) -> str:
    """A line without srun's `N: ` rank label."""
    return re.sub(r"^\d+: ", "", line.strip())


class _Report:
    """One hypothesis-testing report while it is read."""

    def __init__(self) -> None:
        self.higher = True
        self.metric: str | None = None
        self.reference: float | None = None
        self.threshold: float | None = None

    def add_to(self, task: dict[str, Any], value: float) -> None:
        metric = self.metric or "accuracy"
        assert self.threshold is not None  # add_to is called once the threshold is read
        task.setdefault(metric, value)
        task[f"{metric}_reference"] = self.reference
        task[f"{metric}_threshold"] = self.threshold
        task["higher_is_better"] = self.higher
        ok = value >= self.threshold if self.higher else value <= self.threshold
        task["passed"] = ok


def result_lines(results: dict[str, Any]) -> list[str]:
    """`results` for a person: a line per group of figures, a line per case of a group of
    cases (perf-sanity's)."""
    lines = []
    for group, values in results.items():
        if isinstance(values.get("cases"), list):
            for case in values["cases"]:
                lines.append(f"results: {group}: {case['case']}: {case['outcome']}")
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
