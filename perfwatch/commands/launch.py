"""`perfwatch launch CAMPAIGN.yaml`: validate, plan, start and watch a campaign of training runs."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.commands import _metrics
from perfwatch.commands._options import path_arg

if TYPE_CHECKING:  # the engine is imported when a campaign runs, not for `perfwatch --help`
    from perfwatch.core.control.campaign import Campaign
    from perfwatch.core.engine import Session
    from perfwatch.exporters.metrics import MetricsServer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launch",
        help="run a campaign YAML (runs, grids, repeats) and watch it live",
        description="Validate the campaign (errors name file:line:field, exit 2, nothing started), create "
        "LOGDIR, start every run in its own process group and watch it. Runs survive perfwatch: "
        "`perfwatch attach LOGDIR` reopens them.",
    )
    p.add_argument("campaign", type=path_arg, nargs="?", help="campaign YAML file")
    p.add_argument("--demo", action="store_true",
                   help="the demo campaign shipped with perfwatch (needs torch: pip install 'perfwatch[workloads]'); "
                   "its LOGDIR goes under ./runs/")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="launch only the runs of this job, run group or run id (repeat it for more)")
    p.add_argument("--dry-run", action="store_true", help="print the expanded plan; start nothing")
    p.add_argument("--headless", action="store_true", help="plain progress lines and a final table (no TUI)")
    p.add_argument("--detach", action="store_true", help="run the campaign in the background and return")
    p.add_argument("--logdir", type=path_arg, help="override the campaign's logdir")
    p.add_argument("--poll", action="store_true", help="poll files instead of inotify (NFS, Lustre)")
    p.add_argument("--theme", help="TUI theme name")
    _metrics.add_arguments(p)
    p.add_argument("--backend", choices=("local", "slurm"),
                   help="where runs execute: local processes or one Slurm job each (overrides scheduler: backend)")
    p.set_defaults(func=run)


def gpus_line(gpus: tuple[int, ...]) -> str:
    """Which GPUs runs may get, and why those (perfwatch's own CUDA_VISIBLE_DEVICES limits them)."""
    limit = os.environ.get("CUDA_VISIBLE_DEVICES")
    why = f" (limited by CUDA_VISIBLE_DEVICES={limit!r})" if limit is not None else ""
    if not gpus:
        return f"GPUs: none visible{why}: runs train on the CPU"
    return f"GPUs: {', '.join(map(str, gpus))}{why}; numbered in PCI bus order as NVML does"


def print_plan(campaign: Campaign, logdir: Path) -> None:
    from perfwatch.core.control.scheduler import planned_devices
    from perfwatch.core.mlperf.targets import official_target

    n = len(campaign.runs)
    print(f"campaign {campaign.name}: {n} run{'s' if n != 1 else ''} -> {logdir}")
    mp = campaign.max_parallel if campaign.max_parallel is not None else "auto"
    print(f"max_parallel: {mp}" + (f"   baseline: {campaign.baseline}" if campaign.baseline else "")
          + ("   backend: slurm" if campaign.backend.backend == "slurm" else ""))
    slurm = campaign.backend.backend == "slurm"
    folders = {r.cwd for r in campaign.runs}
    if len(folders) == 1:  # relative scripts resolve here (the campaign file's folder unless it says otherwise)
        print(f"working directory: {folders.pop()}")
    print("GPUs: requested per run with --gres on the compute nodes" if slurm else gpus_line(campaign.gpus))
    where = planned_devices(campaign.runs, campaign.gpus, campaign.max_parallel)
    for r in campaign.runs:
        device = where[r.run_id] + (f" ({r.devices_note})" if r.devices_note and r.devices_note != "auto" else "")
        if slurm:  # the compute nodes' GPUs, through --gres
            device = f"--gres=gpu:{r.devices}" if r.devices else (r.devices_note or "no GPU")
        limits = [f"seed {r.seed}", device]
        if r.timeout:
            limits.append(f"timeout {r.timeout:g}s")
        if r.stall_after:
            limits.append(f"stall {r.stall_after:g}s")
        if r.target:
            limits.append(("exit at " if r.exit_at_target else "target ") + r.target.describe())
        if r.mlperf:
            limits.append(f"stands for {r.mlperf.describe()}")
            official = None if r.target else official_target(r.mlperf.benchmark, r.mlperf.ruleset, r.mlperf.division)
            if official is not None:  # the default when the log gives no target of its own
                limits.append(("exit at " if r.exit_at_target else "target ") + official.describe()
                              + f" ({r.mlperf.benchmark}'s, unless the log gives one)")
        print(f"  {r.run_id:<26} {', '.join(limits)}")
        if r.cache_clear_cmd:
            limit = f" (timeout {r.cache_clear_timeout:g}s)" if r.cache_clear_timeout else ""
            print(f"  {'':<26} first: {shlex.join(r.cache_clear_cmd)}{limit}")
        print(f"  {'':<26} {shlex.join(r.argv)}")
        if slurm:
            from perfwatch.core.control.backends.slurm import job_instructions, sbatch_argv
            from perfwatch.core.control.backends.slurm_job import workload_argv
            from perfwatch.core.layout import run_dir

            folder = run_dir(logdir, r.run_id).resolve()
            print(f"  {'':<26} {shlex.join(sbatch_argv(campaign.backend, r, folder))} ...")
            step = workload_argv(job_instructions(campaign.backend, r, folder, {}), {}, master="FIRST_NODE")
            if step and step[0] == "srun":  # the step the job runs its workload as (containers, several nodes)
                print(f"  {'':<26} in the job: {shlex.join(step)}")


def detach(logdir: Path, extra: list[str] | None = None) -> int:
    """Hand the campaign to a background `perfwatch attach --headless` in its own session."""
    from perfwatch.core.layout import SCHEDULER_OUTPUT_FILE

    with open(logdir / SCHEDULER_OUTPUT_FILE, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfwatch", "attach", str(logdir), "--headless", "--owner", *(extra or [])],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    print(f"campaign running in the background (scheduler pid {proc.pid}); logs in {logdir}")
    print(f"  perfwatch attach {logdir}")
    return 0


def open_ui(session: Session, args: argparse.Namespace, *, stop_on_interrupt: bool,
            server: MetricsServer | None = None) -> int:
    """The TUI when stdout is a terminal and it is installed; headless otherwise. `server`: this
    process's metrics endpoint, handed to the background owner when the user leaves runs going."""
    if not args.headless and (sys.stdout.isatty() or getattr(args, "tui", False)):
        try:
            from perfwatch.ui.entry import run_tui
        except ImportError:
            pass
        else:
            def handoff() -> list[str]:
                if server is not None:
                    server.close()  # the port is free again: the background owner listens on it from now on
                return _metrics.forward(args)

            return int(run_tui(session, theme=args.theme, handoff=handoff))
    from typing import TextIO, cast

    from perfwatch.text.escape import EscapingWriter
    from perfwatch.text.headless import run_headless

    out = cast(TextIO, EscapingWriter(sys.stdout))  # log lines and run output may hold control sequences
    return run_headless(session, out, stop_on_interrupt=stop_on_interrupt, once=getattr(args, "once", False))


def demo_campaign() -> Path:
    """The demo campaign inside the installed package (the checkout's workloads/, linked as perfwatch/workloads)."""
    import perfwatch

    return Path(perfwatch.__file__).parent / "workloads" / "demo.yaml"


def run(args: argparse.Namespace) -> int:
    from perfwatch.core.control.campaign import CampaignError, load_campaign, select_runs
    from perfwatch.core.engine import expand_logdir, launch_session

    if args.demo == (args.campaign is not None):
        print("perfwatch launch: name a campaign YAML file, or --demo", file=sys.stderr)
        return 2
    if args.demo:
        args.campaign = demo_campaign()
    try:
        campaign = load_campaign(args.campaign, backend=args.backend)
        if args.only:
            campaign = select_runs(campaign, args.only)
    except CampaignError as exc:
        print(f"perfwatch launch: {exc}", file=sys.stderr)
        return 2
    logdir = args.logdir or expand_logdir(campaign.logdir, campaign.name)
    if args.dry_run:
        print_plan(campaign, logdir)
        return 0
    server, rc = _metrics.bind(args, "launch")
    if rc:
        return rc
    from perfwatch.core.measure import host_peak

    # the MFU of CPU runs needs this host's peak for their thread count: measured now, before they load the CPUs
    # (and before the live view opens); on a terminal the seconds count on the line the result then replaces
    tty = sys.stderr.isatty()

    def say(line: str) -> None:
        print(("\r\x1b[K" if tty else "") + line, file=sys.stderr, flush=True)

    def progress(seconds: float) -> None:
        print(f"\r\x1b[K  {seconds:.0f} s (at most {host_peak.ENSURE_TIMEOUT_S:.0f} s; the runs start after it)",
              end="", file=sys.stderr, flush=True)

    host_peak.ensure(host_peak.campaign_needs(campaign), say=say, progress=progress if tty else None)
    try:
        session = launch_session(campaign, logdir, poll=args.poll)
    except (FileExistsError, RuntimeError, OSError) as exc:  # BackendError too (e.g. no sbatch)
        print(f"perfwatch launch: {exc}", file=sys.stderr)
        if server is not None:
            server.close()
        return 2
    if args.detach:
        assert session.controller is not None
        session.controller.close(stop_runs=False)
        url = server.url if server is not None else None
        if server is not None:
            server.close()  # the port was free: the background owner listens on it from now on
        rc = detach(logdir, _metrics.forward(args))
        if url:
            print(f"  metrics: {url}")
        return rc
    return _metrics.serving(server, session, lambda: open_ui(session, args, stop_on_interrupt=True, server=server),
                             args.metrics_grace)
