"""What a backend tells every layer: the one object each module of `backends/` registers in
`model.registry.BACKENDS` under every execution scenario it serves. The layers below never name
a scenario: they ask the registry's object, and a scenario none registered is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.registry import BACKENDS

Run = Callable[..., Any]


def _none(*_: Any, **__: Any) -> Any:
    raise BuildError("execution_scenario", "this backend cannot run jobs", "pick another")


def _no_check(spec: Any, *_: Any, **__: Any) -> Any:
    name = backend_of(spec.execution_scenario).name
    raise BuildError("execution_scenario", f"check has no check for {name} jobs", "submit it")


def refuse_options(spec: Any, *, ssh_host: str | None, persistent: bool = False) -> None:
    """Options a job cannot honour, refused rather than ignored."""
    scenario = spec.execution_scenario
    b = backend_of(scenario)
    if ssh_host and scenario not in b.over_ssh:
        # the user meant another job, or a remote build of this one
        raise BuildError(
            "ssh_host",
            f"the job is {scenario}, which runs on this machine's cluster or Docker",
            f"drop --ssh-host (it is for {scenarios_where(lambda b, s: s in b.over_ssh, ' and ')} jobs)",
        )
    if persistent and scenario not in b.persistent:
        raise BuildError(
            "persistent",
            f"persistent mode is for {scenarios_where(lambda b, s: s in b.persistent)}, not {scenario}",
            "drop --persistent",
        )


@dataclass(frozen=True)
class Backend:
    """Build time is plain data; run time is loosely typed callables, so no layer imports up."""

    name: str
    scenarios: tuple[str, ...]
    queued: bool  # a scheduler queues its jobs: cluster file, sbatch values, prerequisite jobs
    over_ssh: tuple[str, ...] = ()  # scenarios whose scheduler is reached over ssh
    persistent: tuple[str, ...] = ()  # scenarios whose jobs may run in a held allocation
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()  # request field -> scenarios reading it
    steps: Callable[[Any], tuple[str, str]] = lambda _: ("", "")  # the report's check, submit
    refuse_options: Run = refuse_options
    submit: Run = _none
    followed: Run = _none
    host: Run = _none
    check: Run = _no_check  # (spec, work_dir, *, ssh_host, host, user) -> process.check.Checked


def register_backend(backend: Backend) -> Backend:
    for scenario in backend.scenarios:
        BACKENDS.register(scenario, backend)
    return backend


def backend_of(scenario: str) -> Backend:
    if scenario not in BACKENDS:
        raise BuildError(
            "execution_scenario",
            f"no backend runs {scenario} jobs",
            "build the job again with this version",
        )
    return cast(Backend, BACKENDS.get(scenario))


def queued(req: Any) -> bool:
    return backend_of(req.execution_scenario).queued


def over_ssh(scenario: str) -> bool:
    return scenario in backend_of(scenario).over_ssh


def scenarios_where(what: Callable[[Backend, str], bool], sep: str = " or ") -> str:
    """The scenarios for which `what` holds, for a message."""
    return sep.join(s for s in BACKENDS.names() if what(backend_of(s), s))


def scenario_fields() -> dict[str, tuple[str, ...]]:
    """The request fields only some scenarios read, with those scenarios."""
    out: dict[str, tuple[str, ...]] = {}
    for b in dict.fromkeys(cast(tuple[Backend, ...], BACKENDS.items())):
        for name, where in b.fields:
            out[name] = out.get(name, ()) + where
    return out
