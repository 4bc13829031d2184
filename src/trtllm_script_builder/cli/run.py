"""`submit`, `watch`, `run` and `release`: the click commands (loaded lazily by the CLI group)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trtllm_script_builder.cli import fail, say, warn
from trtllm_script_builder.cli.flags import FieldsCommand
from trtllm_script_builder.errors import BuildError

WORK_DIR = click.Path(file_okay=False, path_type=Path)

VERDICT_HELP = """\b
Exit status: 0 PASSED, 1 FAILED, 10 INFRA_FAILURE, 11 TIMEOUT, 12 CANCELLED,
13 OUT_OF_MEMORY, 14 HANG_DETECTED, 15 NOT_RUN (no test passed), 16 COMPILE_FAILED (the compile
job failed, the test job never started); 2 nothing to watch (no job_spec.json or
submission.json), 3 a tool failed (sbatch, ssh, Slurm forgot the job)."""


def _submit_options(f: Any) -> Any:
    f = click.option(
        "--alloc-time",
        default=None,
        metavar="TIME",
        help="time limit of a new held allocation (default 04:00:00, capped at the "
        "partition's MaxTime)",
    )(f)
    f = click.option(
        "--persistent/--one-shot",
        default=False,
        help="this machine's Slurm: run inside a held allocation (reused while it fits; "
        "`release` frees it) instead of sbatch; the job must be built with persistent_mode",
    )(f)
    f = click.option(
        "--ssh-host",
        default=None,
        metavar="HOST",
        help="a remote Slurm job: ssh to this host (default: job_spec ssh_host, else slurm_env's)",
    )(f)
    f = click.option("--force", is_flag=True, help="submit even if WORK_DIR was submitted")(f)
    return f


class _Seconds(click.FloatRange):
    """Seconds within a range, and a number: `nan` compares false with every bound (a
    `--timeout nan` never came) and `inf` passes the lower one (`--poll 1e999` ended watch in
    an OverflowError, the job left running)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value} is not a number of seconds", param, ctx)
        return rv


def _watch_options(f: Any) -> Any:
    f = click.option(
        "--quiet", "-q", is_flag=True, help="no log lines and no progress, only the verdict"
    )(f)
    f = click.option(
        "--poll",
        type=_Seconds(min=0.05, max=86_400),
        default=5.0,
        show_default=True,
        metavar="S",
        help="seconds between polls",
    )(f)
    f = click.option(
        "--json", "as_json", is_flag=True, help="end with one JSON object (the last line)"
    )(f)
    f = click.option(
        "--keep-running", is_flag=True, help="on --timeout, leave the job running (verdict TIMEOUT)"
    )(f)
    f = click.option(
        "--timeout",
        type=_Seconds(min=0, min_open=True, max=366 * 86_400),
        default=None,
        metavar="SECONDS",
        help="stop waiting after this long: verdict TIMEOUT, and the job is cancelled",
    )(f)
    return f


@click.command("submit")
@click.argument("work_dir", type=WORK_DIR)
@_submit_options
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="a build-many folder: at most N jobs of one array run at once (sbatch --array=...%N)",
)
@click.option("--json", "as_json", is_flag=True, help="print submission.json")
def submit(
    work_dir: Path,
    force: bool,
    ssh_host: str | None,
    persistent: bool,
    alloc_time: str | None,
    max_running: int | None,
    as_json: bool,
) -> None:
    """Start the job built in WORK_DIR and record it in WORK_DIR/submission.json.

    A build-many folder (it holds jobs.json) submits every job it built: jobs of the same
    #SBATCH shape as one Slurm job array, the others as plain jobs (docs/batches.md).

    \b
    local Slurm   sbatch --parsable <script>; a job built with compile or sqsh_cache_dir
                  first submits import.slurm and compile.slurm, then the script with
                  --dependency=afterok:<their ids> --kill-on-invalid-dep=yes
                  --persistent: bash <script> inside a held allocation (see below)
    remote Slurm  copy the script and extra_files to remote_work_dir over ssh
                  (ControlMaster; ssh_host from job_spec, --ssh-host wins), sbatch there
    local Docker  bash docker_cmd.sh > log_file 2>&1, in the background (pid recorded)

    A work_dir is submitted once; --force submits it again. Persistent mode is opt-in even
    when job_spec says persistent_mode true, because a held allocation keeps its nodes busy
    until `release`: it is reused while RUNNING with more than 5 minutes left, on the same
    partition, account and image, with enough nodes and tasks per node; its state file is
    <repo_root>/work_dirs/.slurm_alloc.json. $TSB_SSH_CONFIG names an ssh config file.

    \b
    Example:
      trtllm-script-builder submit work_dirs/llama_20260101 && trtllm-script-builder watch work_dirs/llama_20260101

    Exit status: 0 submitted, 2 refused (already submitted, nothing built), 3 a tool failed.
    """
    from trtllm_script_builder.process.slurm_submit import is_batch, submit_batch
    from trtllm_script_builder.process.submit import submit as do_submit

    try:
        if is_batch(work_dir):
            if persistent:
                raise BuildError(
                    "persistent", "a build-many folder is not run in a held allocation", "drop it"
                )
            from trtllm_script_builder.process.submit import one_submit

            with one_submit(work_dir.resolve()):
                record: Any = submit_batch(
                    work_dir, max_running=max_running, force=force, ssh_host=ssh_host, say=say
                )
            line = _batch_line(record)
        else:
            if max_running is not None:
                raise BuildError(
                    "max_running",
                    f"{work_dir} is one job, not a build-many folder (no jobs.json)",
                    "drop --max-running",
                )
            record = do_submit(
                work_dir,
                force=force,
                ssh_host=ssh_host,
                persistent=persistent,
                alloc_time=alloc_time,
                say=say,
            )
            line = _submitted_line(record)
    except BuildError as err:
        fail(err)
        return
    if as_json:
        import json

        click.echo(json.dumps(record.model_dump(exclude_none=True), indent=2))
    else:
        click.echo(line)


def _batch_line(batch: Any) -> str:
    plain = len(batch.jobs) - sum(a.size for a in batch.arrays)
    return (
        f"submitted {len(batch.jobs)} job(s): {len(batch.arrays)} array(s), {plain} plain "
        f"job(s); record {batch.batch_dir}/batch_submission.json\n"
        f"follow them: trtllm-script-builder watch {batch.batch_dir}"
    )


def _submitted_line(sub: Any) -> str:
    what = f"job {sub.job_id}" if sub.pid is None else f"pid {sub.pid}"
    if sub.persistent:
        what = f"pid {sub.pid} in allocation {sub.alloc_job_id}"
    where = f" on {sub.ssh_host}" if sub.ssh_host else ""
    if sub.prerequisites:  # the compile and import jobs it waits for (decision compile-chain)
        what += " after " + ", ".join(f"{p['kind']} job {p['job_id']}" for p in sub.prerequisites)
    return (
        f"submitted {what}{where} ({sub.scenario}); log {sub.log_file}\n"
        f"follow it: trtllm-script-builder watch {sub.work_dir}"
    )


@click.command("watch", epilog=VERDICT_HELP)
@click.argument("work_dir", type=WORK_DIR)
@_watch_options
@click.option(
    "--ssh-host", default=None, metavar="HOST", help="a remote Slurm job: ssh to this host"
)
def watch(
    work_dir: Path,
    timeout: float | None,
    keep_running: bool,
    as_json: bool,
    poll: float,
    quiet: bool,
    ssh_host: str | None,
) -> None:
    """Follow the job submitted from WORK_DIR to its end and give one verdict.

    Streams new log lines (stdout; stderr-file lines marked [stderr]) with a progress line
    (stderr); `hang detected` in the log cancels the job. Ends with the verdict and the lines
    that decided it (also written to WORK_DIR/verdict.json): PASSED, FAILED, NOT_RUN, TIMEOUT,
    CANCELLED, OUT_OF_MEMORY, HANG_DETECTED, INFRA_FAILURE or COMPILE_FAILED. A job with a
    compile or image import job follows those first (their lines marked [compile], [import]). Slurm's state and the exit code
    decide first; only the program's own output is matched against the job_spec patterns.

    A build-many folder (it holds jobs.json) is watched as a whole: one progress line, each
    job's verdict.json, then results.json and a merged junit.xml in the folder; the exit
    status is 0 when every job PASSED, the verdict's status when all others share one, else 1
    (docs/batches.md). --timeout cancels every open job; Ctrl-C asks whether to.

    \b
    Example:
      trtllm-script-builder watch work_dirs/llama_20260101 --timeout 3600 --json
    """
    _do_watch(work_dir, timeout, keep_running, as_json, poll, quiet, ssh_host)


def _do_watch(
    work_dir: Path,
    timeout: float | None,
    keep_running: bool,
    as_json: bool,
    poll: float,
    quiet: bool,
    ssh_host: str | None,
) -> None:
    from trtllm_script_builder.process.slurm_submit import is_batch
    from trtllm_script_builder.process.watch import Console, render_verdict, verdict_json
    from trtllm_script_builder.process.watch import watch as do_watch

    out = sys.stdout
    err = sys.stderr
    if is_batch(work_dir):
        _watch_batch(work_dir, timeout, keep_running, as_json, poll, quiet, ssh_host)
        return
    try:
        result = do_watch(
            work_dir,
            timeout=timeout,
            keep_running=keep_running,
            poll=poll,
            ssh_host=ssh_host,
            console=Console(out, err, quiet=quiet),
        )
    except BuildError as e:
        fail(e)
        return
    except KeyboardInterrupt:
        click.echo(f"\nwatch interrupted; the job keeps running (watch {work_dir} again)", err=True)
        sys.exit(130)
    if as_json:
        click.echo(render_verdict(result), nl=False, err=True)
        click.echo(verdict_json(result))
    else:
        click.echo(render_verdict(result), nl=False)
    sys.exit(result.exit_status)


def _ask_cancel(open_jobs: int) -> bool:
    """Ctrl-C during a batch watch: on a terminal ask; off one, cancel."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True
    try:
        return click.confirm(
            f"\ncancel the batch's {open_jobs} unfinished job(s)?", default=True, err=True
        )
    except (click.Abort, EOFError):
        return True


def _watch_batch(
    folder: Path,
    timeout: float | None,
    keep_running: bool,
    as_json: bool,
    poll: float,
    quiet: bool,
    ssh_host: str | None,
) -> None:
    import json

    from trtllm_script_builder.process.batch_results import render_results
    from trtllm_script_builder.process.watch import Console, watch_batch

    try:
        result = watch_batch(
            folder,
            timeout=timeout,
            keep_running=keep_running,
            poll=poll,
            console=Console(sys.stdout, sys.stderr, quiet=quiet),
            on_interrupt=_ask_cancel,
            ssh_host=ssh_host,
        )
    except BuildError as e:
        fail(e)
        return
    except KeyboardInterrupt:
        click.echo(f"\nwatch interrupted; the jobs keep running (watch {folder} again)", err=True)
        sys.exit(130)
    click.echo(render_results(result), nl=False, err=as_json)
    if as_json:
        click.echo(json.dumps(result.to_json(), separators=(",", ":")))
    sys.exit(result.exit_status)


# ---------------------------------------------------------------- run


@click.command("run", cls=FieldsCommand, epilog=VERDICT_HELP)
@click.argument("request", required=False)
@_submit_options
@_watch_options
def run(
    request: str | None,
    force: bool,
    ssh_host: str | None,
    persistent: bool,
    alloc_time: str | None,
    timeout: float | None,
    keep_running: bool,
    as_json: bool,
    poll: float,
    quiet: bool,
    **fields: Any,
) -> None:
    """Build REQUEST (as `build` does; every request field is also a flag), submit the job
    and watch it to a verdict, in one go. A work_dir that holds another job, or one that was
    submitted, is not built over unless --force.

    \b
    Example:
      trtllm-script-builder run req.yaml --timeout 1800 --json
    """

    from trtllm_script_builder.build import build as run_build
    from trtllm_script_builder.build import finish, problems_of, work_dir_parent_warnings
    from trtllm_script_builder.cli.prompt import offer_to_save, prompter_for
    from trtllm_script_builder.model.request import request_from_cli
    from trtllm_script_builder.model.site_config import load_site_config
    from trtllm_script_builder.process.submission import SUBMISSION
    from trtllm_script_builder.process.submit import submit as do_submit

    try:
        req = request_from_cli(request, fields, problems_of)
        made = work_dir_parent_warnings(req.work_dir, req.repo_root)
        work_dir = Path(req.work_dir)
        if (work_dir / SUBMISSION).exists() and not force:
            raise BuildError(
                "work_dir",
                f"{work_dir} holds a job that was already submitted",
                "use another work_dir, or pass --force to build and submit again",
            )
        prompter = prompter_for(request)
        result = run_build(req, load_site_config(), prompter)
        finish(result, force)  # --force builds over another job's folder, as build's does
        warn([*made, *result.spec.warnings])
        say(f"built {result.spec.script_path}")
        offer_to_save(prompter)
        sub = do_submit(
            work_dir,
            force=force,
            ssh_host=ssh_host,
            persistent=persistent,
            alloc_time=alloc_time,
            say=say,
        )
        say(_submitted_line(sub))
    except BuildError as err:
        fail(err)
        return
    _do_watch(work_dir, timeout, keep_running, as_json, poll, quiet, ssh_host)


# ---------------------------------------------------------------- release


@click.command("release")
@click.argument("work_dir", type=WORK_DIR, required=False)
@click.option(
    "--repo-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="the repo whose work_dirs/.slurm_alloc.json names the allocation "
    "(default: WORK_DIR's job_spec repo_root)",
)
def release(work_dir: Path | None, repo_root: Path | None) -> None:
    """Cancel the held persistent allocation and remove its state file.

    The allocation is the one named in <repo_root>/work_dirs/.slurm_alloc.json; it is never
    released automatically.

    \b
    Example:
      trtllm-script-builder release work_dirs/llama_20260101

    Exit status: 0 released (or nothing held), 2 no repo given, or the state file names an
    allocation of another checkout (left running).
    """
    from trtllm_script_builder.process.persistent import STATE_FILE, state_dir
    from trtllm_script_builder.process.persistent import release as do_release
    from trtllm_script_builder.process.spec_file import read_job_spec as load_spec

    try:
        if repo_root is None:
            if work_dir is None:
                raise BuildError("work_dir", "names no job", "give WORK_DIR or --repo-root")
            repo_root = Path(load_spec(work_dir.resolve()).repo_root)
    except BuildError as err:
        fail(err)
        return
    try:
        job = do_release(repo_root)
    except BuildError as err:
        fail(err)
        return
    if job:
        click.echo(f"released allocation {job}; removed {state_dir(repo_root) / STATE_FILE}")
    else:
        click.echo(f"no allocation held for {repo_root}")


commands = [submit, watch, run, release]
