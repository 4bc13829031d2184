"""Slurm times, both ways: the one parser for what sbatch --time takes and squeue/scontrol/sacct
print, and seconds back to D-HH:MM:SS.

sbatch --time takes `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` and `D-HH:MM:SS`; a bare
number is minutes. The tools print `[D-]HH:MM:SS` or `MM:SS`, which read the same way, so one
parser serves a request's limit, a partition's MaxTime, a job's TimeLimit/RunTime and squeue's
time left.
"""

from __future__ import annotations

import re

_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
# Words Slurm uses for "no limit"; a caller comparing limits treats these as unlimited.
UNLIMITED = frozenset({"UNLIMITED", "INFINITE", "NONE", "N/A"})


def _seconds(value: str) -> int:
    """Seconds of a Slurm time; ValueError when the whole string is not one."""
    m = _TIME.fullmatch(value)
    if not m:
        raise ValueError(f"not a Slurm time: {value!r}")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def parse_time_minutes(value: str) -> float | None:
    """A Slurm time in minutes; None for unlimited, ValueError when it is not a time.

    Callers that must tell "no limit" from "not a time" (a request, a partition's MaxTime)
    use this one.
    """
    if value.upper() in UNLIMITED:
        return None
    return _seconds(value) / 60


def time_to_seconds(value: str | None) -> int | None:
    """A Slurm time in seconds; None for anything that is not a time (unset, `UNLIMITED`,
    `INVALID`, `Partition_Limit`, garbage), for callers that only act on a known length."""
    if not value:
        return None
    try:
        return _seconds(value)
    except ValueError:
        return None


def seconds_to_time(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"
