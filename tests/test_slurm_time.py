"""The one Slurm time parser: every form sbatch --time takes and squeue/scontrol/sacct print."""

from __future__ import annotations

import pytest

from trtllm_script_builder.process.slurm import status_from_scontrol
from trtllm_script_builder.slurm_time import parse_time_minutes, seconds_to_time, time_to_seconds

FORMS = [
    ("30", 1800),  # a bare number is minutes, as for sbatch --time
    ("5", 300),
    ("30:00", 1800),  # minutes:seconds
    ("10:30", 630),
    ("00:05:00", 300),  # hours:minutes:seconds
    ("4:00:00", 14400),
    ("02:00:00", 7200),
    ("1-00:00:00", 86400),  # days-hours:minutes:seconds
    ("2-3", 2 * 86400 + 3 * 3600),  # days-hours
    ("1-2", 93600),
    ("1-01:30", 86400 + 5400),  # days-hours:minutes
]


@pytest.mark.parametrize(("text", "seconds"), FORMS)
def test_each_form_in_seconds(text: str, seconds: int) -> None:
    assert time_to_seconds(text) == seconds


@pytest.mark.parametrize(("text", "seconds"), FORMS)
def test_each_form_in_minutes(text: str, seconds: int) -> None:
    assert parse_time_minutes(text) == seconds / 60


@pytest.mark.parametrize(
    "text", ["UNLIMITED", "INVALID", "Partition_Limit", "NOT_SET", "N/A", "infinite", "", None]
)
def test_not_a_length_is_none_in_seconds(text: str | None) -> None:
    assert time_to_seconds(text) is None


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite", "NONE"])
def test_unlimited_is_none_in_minutes(text: str) -> None:
    assert parse_time_minutes(text) is None


GARBAGE = ["abc", "1:2:3:4", "-1", "1-", "30\n", " 30", "4:00:00\n", "1-00:00:00x", "1.5"]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_is_none_in_seconds(text: str) -> None:
    assert time_to_seconds(text) is None


@pytest.mark.parametrize("text", [*GARBAGE, "", "INVALID", "Partition_Limit"])
def test_garbage_is_refused_in_minutes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time_minutes(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(300, "00:05:00"), (93600, "1-02:00:00"), (59, "00:00:59")]
)
def test_seconds_to_time_round_trips(seconds: int, text: str) -> None:
    assert seconds_to_time(seconds) == text
    assert time_to_seconds(text) == seconds


def test_time_left_from_scontrol() -> None:
    st = status_from_scontrol(
        "5", "JobId=5 JobState=RUNNING ExitCode=0:0 RunTime=1-00:00:10 TimeLimit=2-00:00:00"
    )
    assert st.time_left == "23:59:50"
    unlimited = status_from_scontrol(
        "6", "JobId=6 JobState=RUNNING ExitCode=0:0 RunTime=00:00:10 TimeLimit=UNLIMITED"
    )
    assert unlimited.time_left is None
