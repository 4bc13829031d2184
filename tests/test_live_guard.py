"""The live tests submit only to the project's own test cluster: any other cluster that
answers (a login node of a real one) makes them skip, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import CONF_MARK, not_ours


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, config: str) -> Path:
    """A config file whose first line is `first`, and an `scontrol` on PATH that answers
    `show config` with `config`."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"{first}\nClusterName=whatever\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat <<'EOF'\n{config}\nEOF\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return conf


OURS = "ClusterName             = tsb\nSlurmctldHost[0]        = vm(127.0.0.1)"


def test_the_test_cluster_is_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not_ours(_cluster(tmp_path, monkeypatch, CONF_MARK, OURS)) is None


@pytest.mark.parametrize(
    ("first", "config", "reason"),
    [
        ("# site config", OURS, "was not written by tests/slurm/cluster.sh"),
        (CONF_MARK, OURS.replace("= tsb", "= prod"), "the cluster answering is 'prod'"),
        (
            CONF_MARK,
            OURS.replace("vm(127.0.0.1)", "head01(10.1.2.3)"),
            "is not on this machine's loopback",
        ),
    ],
)
def test_another_cluster_is_not_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, config: str, reason: str
) -> None:
    why = not_ours(_cluster(tmp_path, monkeypatch, first, config))
    assert why is not None and reason in why
