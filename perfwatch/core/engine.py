"""A `Session`: everything a front end (TUI or headless) needs for one LOGDIR.

`launch_session` creates the LOGDIR and a `Scheduler` that owns it. `attach_session`
opens an existing folder: if it is a perfwatch LOGDIR whose scheduler is gone (perfwatch
was killed, or the campaign finished) it takes the campaign over and re-adopts its runs;
if a detached scheduler still owns it, it controls it through requests
(`ClientController`); any other folder of mllog files is watched with no controller.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from perfwatch.core.control import registry
from perfwatch.core.control.campaign import Campaign
from perfwatch.core.control.controller import ClientController, Controller
from perfwatch.core.control.scheduler import Scheduler, Untrusted
from perfwatch.core.model.book import RunBook


@dataclass
class Session:
    logdir: Path
    title: str
    book: RunBook
    watcher_roots: list[Path]
    poll: bool
    controller: Controller | None
    host: dict = field(default_factory=dict)
    baseline: str | None = None
    untrusted: Untrusted | None = None  # a registry not signed by this user here: watched only

    def target_reached(self, run_id: str) -> bool:
        """What `exit_at_target` asks: does this run's log say its target was reached?"""
        run = self.book.get(run_id)
        return run is not None and run.view().target_reached

    @property
    def owns_campaign(self) -> bool:
        return isinstance(self.controller, Scheduler)


def expand_logdir(template: str, name: str, now: float | None = None) -> Path:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.localtime(now if now is not None else time.time()))
    return Path(template.format(name=name, timestamp=stamp))


def launch_session(campaign: Campaign, logdir: Path, *, poll: bool = False) -> Session:
    """Create LOGDIR, write the plan, own it. Nothing is started until `controller.poll()`."""
    targets = {r.run_id: r.target for r in campaign.runs if r.target is not None}
    book = RunBook(logdir, targets=targets)
    session = Session(logdir, campaign.name, book, [logdir], poll, None, baseline=campaign.baseline)
    session.controller = Scheduler.create(campaign, logdir, target_reached=session.target_reached)
    session.controller.record_telemetry()
    session.host = session.controller.data.host
    return session


def attach_session(path: Path, *, poll: bool = False, control: bool = True, confirm: str | None = None,
                   ruleset: str | None = None) -> Session:
    """Open LOGDIR (take over / client / plain logs, see module docstring).

    A registry this user did not launch on this host is only watched (`session.untrusted` says
    why) unless `confirm` is its plan's short digest. `registry.RegistryError` when perfwatch.json
    exists but is unreadable or unsafe.
    """
    path = Path(path)
    data = registry.load(path) if path.is_dir() else None
    if data is None:
        root = path.parent if path.is_file() else path
        return Session(root, path.name, RunBook(root, ruleset=ruleset), [path], poll, None)
    book = RunBook(path, ruleset=ruleset, targets=data.targets())
    session = Session(path, data.name or path.name, book, [path], poll, None, host=data.host, baseline=data.baseline)
    if control:
        try:
            owner = Scheduler.take_over(path, target_reached=session.target_reached, confirm=confirm)
        except Untrusted as exc:
            session.untrusted = exc
            return session
        if owner is not None:
            owner.record_telemetry()
        session.controller = owner if owner is not None else ClientController(path)
    return session
