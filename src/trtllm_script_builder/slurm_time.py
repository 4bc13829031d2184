"""Slurm time limits, both ways: the forms sbatch --time takes, and D-HH:MM:SS for seconds."""

from __future__ import annotations

import re

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time_minutes(value: str) -> float | None:
    """A Slurm time (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in minutes.

    None for unlimited (`UNLIMITED`, `infinite`, `NONE`); ValueError when it is not a time.
    """
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    m = _TIME.match(v)
    if not m:
        raise ValueError(f"not a Slurm time: {value!r}")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        h, mi, s = int(a), int(b or 0), int(c or 0)
        return int(days) * 1440 + h * 60 + mi + s / 60
    if c is not None:  # HH:MM:SS
        return int(a) * 60 + int(b) + int(c) / 60
    if b is not None:  # MM:SS
        return int(a) + int(b) / 60
    return float(int(a))  # MM


def seconds_to_time(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"
