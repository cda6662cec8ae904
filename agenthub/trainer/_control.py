"""Why a run stops, and what it says when it has: the stop signal its parts share, the signal
handlers that set it, and the run's summary."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agenthub._errors import AgentHubError

__all__ = ["RunControl", "RunSummary", "StopReason", "interruptible"]

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


@dataclass(frozen=True)
class RunSummary:
    """What a finished (or stopped) run returns: its steps, why it stopped, its time and the
    held-out reward it started and ended with (None without one)."""

    steps: int
    stopped: StopReason
    elapsed_s: float
    last_eval_reward: float | None
    first_eval_reward: float | None

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
