"""`probe --format text`: the slurm_env as a readable table."""

from __future__ import annotations

from typing import Any

COLUMNS = (
    ("NAME", "name"),
    ("STATE", "state"),
    ("TIME_LIMIT", "time_limit"),
    ("NODES", "nodes"),
    ("ARCH", "arch"),
    ("GRES", "gres"),
    ("GPUS_PER_NODE", "gpus_per_node"),
    ("REQUIRES_GRES", "requires_gres"),
)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render_text(env: dict[str, Any]) -> str:
    pmix = env.get("pmix") or {}
    accounts = ", ".join(env.get("accounts") or []) or "-"
    available = ", ".join(pmix.get("available") or []) or "-"
    lines = [
        f"user:              {_cell(env.get('user'))}",
        f"default account:   {_cell(env.get('default_account'))}  (accounts: {accounts})",
        f"default partition: {_cell(env.get('default_partition'))}",
        f"pmix preferred:    {_cell(pmix.get('preferred'))}  (available: {available})",
        "",
    ]
    table = [[head for head, _ in COLUMNS]]
    for part in env.get("partitions") or []:
        table.append([_cell(part.get(key)) for _, key in COLUMNS])
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    for row in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if len(table) == 1:
        lines.append("(no partitions)")
    errors = env.get("errors") or []
    if errors:
        lines += ["", "errors:"] + [f"  - {e}" for e in errors]
    return "\n".join(lines) + "\n"
