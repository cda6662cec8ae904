"""Why a run stops, and what it says when it has: the stop signal its parts share, the signal
handlers that set it, and the run's summary."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agenthub._errors import AgentHubError

__all__ = ["FaultCounts", "Faults", "RunControl", "RunSummary", "StopReason", "interruptible"]

StopKind = Literal[
    "max_steps", "max_minutes", "interrupted", "failed_groups", "no_signal", "stopped"
]


@dataclass(frozen=True)
class StopReason:
    """Why a run stopped: a `kind` to act on, and the words that say it."""

    kind: StopKind
    message: str

    @classmethod
    def interrupted(cls, sig: signal.Signals) -> StopReason:
        return cls("interrupted", f"interrupted by {sig.name}")

    def __str__(self) -> str:
        return self.message


@dataclass
class FaultCounts:
    """Processes of a run that died: how many (`seen`), how many the run went on after
    (`survived`), the episodes they were playing, dropped untrained (`episodes_lost`), and
    the finished episodes carried across a fault or a resume to be trained or judged stale
    (`episodes_kept`)."""

    seen: int = 0
    survived: int = 0
    episodes_lost: int = 0
    episodes_kept: int = 0


@dataclass(frozen=True)
class RunSummary:
    """What a finished (or stopped) run returns: its steps, why it stopped, its time, the
    held-out reward it started and ended with (None without one), the rollout workers it ended
    with (fewer than `ray.rollout_workers` when a lost one found no room for its replacement)
    and the faults it met."""

    steps: int
    stopped: StopReason
    elapsed_s: float
    last_eval_reward: float | None
    first_eval_reward: float | None
    rollout_workers: int
    faults: FaultCounts = field(default_factory=FaultCounts)

    @property
    def interrupted(self) -> bool:
        return self.stopped.kind == "interrupted"

    def to_json(self) -> dict[str, Any]:
        """The summary as `agenthub train` prints it: the stop reason in words."""
        return {**asdict(self), "stopped": self.stopped.message}


class RunControl:
    """The run's stop: asked for by a signal, the user, a time limit or a failure, and seen by
    every part that waits. The first reason given is the one the run stops for."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: StopReason | None = None
        self.failure: AgentHubError | None = None
        """Raised once the run is checkpointed."""

    @property
    def stopping(self) -> bool:
        return self._event.is_set()

    def stop(self, reason: StopReason) -> None:
        """Stop after the step in progress (safe from a signal handler)."""
        self.reason = self.reason or reason
        self._event.set()

    def fail(self, error: AgentHubError, reason: StopReason) -> None:
        """Stop, and raise `error` once the run is checkpointed."""
        self.failure = error
        self.stop(reason)

    def finish(self, reason: StopReason) -> None:
        """Record why the run ends where it is going to end anyway (a limit reached): it
        still evaluates its last policy, as a stop asked for does not."""
        self.reason = self.reason or reason

    async def wait(self) -> None:
        await self._event.wait()

    async def unless_stopped(self, work: Awaitable[Any]) -> bool:
        """Await `work` unless the run is stopped first (Ctrl-C while the engines start or the
        starting policy is evaluated: a minute's wait otherwise); False then, `work` dropped."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                # A gather whose parts are cancelled ends with an error nobody asks for.
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if not task.done():
            return False
        task.result()
        return True


class Faults:
    """The run's lost processes, each told on one line: counted, and bounded. A lost rollout
    worker is replaced up to `max_worker_restarts` times in any hour, a lost learner restarted
    up to `max_learner_restarts` times; past either the run stops with the cause."""

    HOUR_S = 3600.0

    def __init__(
        self,
        max_worker_restarts: int,
        max_learner_restarts: int,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_worker_restarts = max_worker_restarts
        self.max_learner_restarts = max_learner_restarts
        self.log = log
        self.clock = clock
        self.counts = FaultCounts()
        self._worker_restarts: deque[float] = deque()
        self._learner_restarts = 0

    def worker_lost(self, rank: int, cause: BaseException) -> bool:
        """Count rollout worker `rank`'s death; whether it may be replaced."""
        self.counts.seen += 1
        now = self.clock()
        while self._worker_restarts and now - self._worker_restarts[0] >= self.HOUR_S:
            self._worker_restarts.popleft()
        if len(self._worker_restarts) >= self.max_worker_restarts:
            self.log(
                f"rollout worker {rank} died ({_cause(cause)}), with "
                f"{len(self._worker_restarts)} workers replaced in the last hour already "
                f"(run.max_worker_restarts={self.max_worker_restarts}): stopping the run"
            )
            return False
        self._worker_restarts.append(now)
        self.log(f"rollout worker {rank} died ({_cause(cause)}); replacing it")
        return True

    def learner_lost(self, cause: BaseException) -> bool:
        """Count the learner's death; whether it may be restarted."""
        self.counts.seen += 1
        if self._learner_restarts >= self.max_learner_restarts:
            self.log(
                f"the learner died ({_cause(cause)}), restarted {self._learner_restarts} "
                f"times already (run.max_learner_restarts={self.max_learner_restarts}): "
                "stopping the run"
            )
            return False
        self._learner_restarts += 1
        self.log(f"the learner died ({_cause(cause)}); restarting it from the last checkpoint")
        return True

    def survived(self, episodes_lost: int, what: str) -> None:
        """The run goes on after a fault: `what` it did, and the episodes it dropped."""
        self.counts.survived += 1
        self.counts.episodes_lost += episodes_lost
        self.log(f"{what}; {episodes_lost} episode(s) in flight lost, the run goes on")

    def kept(self, episodes: int, where: str) -> None:
        """Finished episodes not yet trained, carried into the session from `where`: each is
        trained, or dropped as stale, as it would have been without the fault."""
        if not episodes:
            return
        self.counts.episodes_kept += episodes
        self.log(f"{episodes} finished episode(s) kept from {where}, to be trained or judged stale")


def _cause(exc: BaseException) -> str:
    """An error's first line, short: Ray's actor errors run to a page."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class interruptible:
    """The first Ctrl-C (or SIGTERM, or SIGHUP: the terminal or ssh session closed) asks the
    run to stop after the current step and save a checkpoint; a second Ctrl-C stops at once."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, control: RunControl, log: Callable[[str], None]
    ) -> None:
        self.loop = loop
        self.control = control
        self.log = log
        self.presses = 0

    def _handle(self, sig: signal.Signals) -> None:
        if self.control.stopping and sig is not signal.SIGINT:
            return  # a supervisor's repeated SIGTERM, a hang-up's SIGHUP twice: still saving
        self.presses += 1
        if self.presses > 1:
            raise KeyboardInterrupt
        self.control.stop(StopReason.interrupted(sig))  # first: a closed terminal fails writes
        self.log(
            f"{sig.name}: stopping after this step and saving a checkpoint "
            "(press Ctrl-C again to quit without saving)"
        )

    def __enter__(self) -> interruptible:
        # A run under nohup ignores SIGHUP to outlive the terminal: it keeps doing so.
        self.signals = [
            sig
            for sig in _STOP_SIGNALS
            if not (sig is signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN)
        ]
        for sig in self.signals:
            self.loop.add_signal_handler(sig, self._handle, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in self.signals:
            self.loop.remove_signal_handler(sig)
