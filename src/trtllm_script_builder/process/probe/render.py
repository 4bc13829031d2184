"""`probe --format text`: the slurm_env as a readable table.

`render_text` is the plain table (pipes, files, tests); `print_text` picks: on a terminal a
rich table in colour (rich is imported only then), else the plain text. `NO_COLOR` turns the
colour off.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

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


STATE_STYLES = {"up": "green", "down": "red", "drain": "yellow", "inactive": "red"}


def print_text(env: dict[str, Any], stream: TextIO | None = None) -> None:
    """Print the slurm_env to `stream` (standard output by default): a rich table on a terminal."""
    from trtllm_script_builder.output.report import is_terminal, terminal_console

    out = stream if stream is not None else sys.stdout
    if not is_terminal(out):
        out.write(render_text(env))
        out.flush()
        return
    from rich.table import Table
    from rich.text import Text

    console = terminal_console(out)
    pmix = env.get("pmix") or {}
    accounts = ", ".join(env.get("accounts") or []) or "-"
    available = ", ".join(pmix.get("available") or []) or "-"
    for label, value, extra in (
        ("user", _cell(env.get("user")), ""),
        ("default account", _cell(env.get("default_account")), f"  (accounts: {accounts})"),
        ("default partition", _cell(env.get("default_partition")), ""),
        ("pmix preferred", _cell(pmix.get("preferred")), f"  (available: {available})"),
    ):
        console.print(
            Text.assemble((f"{label + ':':<19}", "bold"), (value, "cyan"), (extra, "dim"))
        )
    # Like the plain table: no borders, two spaces between columns; a cell too wide for the
    # terminal folds onto a second line rather than losing characters.
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for head, _ in COLUMNS:
        table.add_column(head, overflow="fold")
    for part in env.get("partitions") or []:
        cells: list[Any] = [_cell(part.get(key)) for _, key in COLUMNS]
        state = str(part.get("state") or "").lower().rstrip("*~#")
        cells[1] = Text(cells[1], style=STATE_STYLES.get(state, ""))
        table.add_row(*cells)
    console.print()
    if table.row_count:
        console.print(table)
    else:
        console.print(Text("(no partitions)", style="dim"))
    errors = env.get("errors") or []
    if errors:
        console.print()
        console.print(Text("errors:", style="bold red"))
        for e in errors:
            console.print(Text(f"  - {e}", style="red"))
