"""The atomic writer: a job folder appears whole or not at all, and a failure leaves no trace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trtllm_script_builder.model.jobspec import OutFile
from trtllm_script_builder.output.writer import write_atomically

FILES = [OutFile("job.slurm", "#!/bin/bash\n", executable=True), OutFile("job_spec.json", "{}\n")]
# A name the kernel refuses, so the second file fails after the first was written.
BROKEN = [FILES[0], OutFile("no/such/dir/x", "")]


def listing(root: Path) -> list[str]:
    """What a reader of the folder sees: the generations of its sets are not listed."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tsb-sets" not in p.parts)


def generations(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".tsb-sets").iterdir())


def test_a_new_folder_appears_with_every_file_and_nothing_else(tmp_path: Path) -> None:
    work = tmp_path / "a" / "b" / "job"
    written = write_atomically(work, FILES)
    assert written == [work / "job.slurm", work / "job_spec.json"]
    assert listing(tmp_path) == [
        "a",
        "a/b",
        "a/b/job",
        "a/b/job/job.slurm",
        "a/b/job/job_spec.json",
    ]
    assert stat.S_IMODE(os.stat(work / "job.slurm").st_mode) & 0o111
    assert not stat.S_IMODE(os.stat(work / "job_spec.json").st_mode) & 0o111
    assert (work / "job.slurm").read_text() == "#!/bin/bash\n"


def test_an_existing_folder_keeps_its_other_files_and_gets_new_contents(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / "job_spec.json").write_text("old")
    write_atomically(tmp_path, FILES)
    assert listing(tmp_path) == ["job.slurm", "job_spec.json", "keep.txt"]
    assert (tmp_path / "job_spec.json").read_text() == "{}\n"
    assert (tmp_path / "keep.txt").read_text() == "mine" and not (
        tmp_path / "keep.txt"
    ).is_symlink()
    # The set's paths read its current generation; the one that held the old file is gone.
    assert os.readlink(tmp_path / "job.slurm") == ".tsb-sets/current/job.slurm"
    (gen,) = [g for g in generations(tmp_path) if g != "current"]
    assert os.readlink(tmp_path / ".tsb-sets" / "current") == gen


def test_a_failure_in_a_new_folder_leaves_no_folder_parent_or_temporary(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        write_atomically(tmp_path / "made" / "job", BROKEN)
    assert listing(tmp_path) == []


def test_a_failure_in_an_existing_folder_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "job.slurm").write_text("old script")
    with pytest.raises(OSError):
        write_atomically(tmp_path, BROKEN)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.slurm"]
    assert (tmp_path / "job.slurm").read_text() == "old script"


def test_a_folder_in_the_way_of_a_file_is_refused_before_anything_moves(tmp_path: Path) -> None:
    """A set never replaces a folder by a file: the user's folder and the old files stay."""
    (tmp_path / "job.slurm").write_text("old script")
    (tmp_path / "job_spec.json").mkdir()
    (tmp_path / "job_spec.json" / "mine.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        write_atomically(tmp_path, FILES)
    assert listing(tmp_path) == ["job.slurm", "job_spec.json", "job_spec.json/mine.txt"]
    assert (tmp_path / "job.slurm").read_text() == "old script"


def test_an_existing_folder_is_written_through_no_lasting_temporary(tmp_path: Path) -> None:
    (tmp_path / "slurm-1.out").write_text("a log")
    for files in (FILES, FILES[:1], FILES):
        write_atomically(tmp_path, files)
        assert listing(tmp_path) == sorted(["slurm-1.out", *(f.name for f in files)])
        assert len(generations(tmp_path)) == 2  # `current` and the one it names
    assert (tmp_path / "slurm-1.out").read_text() == "a log"


def test_a_rebuild_with_the_same_files_keeps_its_generation(tmp_path: Path) -> None:
    """The same set has the same generation name: nothing is switched."""
    (tmp_path / "job_spec.json").write_text("old")
    write_atomically(tmp_path, FILES)
    first = generations(tmp_path)
    (tmp_path / "job.slurm").unlink()  # a link removed by hand comes back
    write_atomically(tmp_path, FILES)
    assert generations(tmp_path) == first
    assert (tmp_path / "job.slurm").read_text() == "#!/bin/bash\n"
