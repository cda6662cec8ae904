"""A watchdog for the event loop the episodes share: code that blocks it (an env calling
`time.sleep`, a synchronous HTTP client, heavy CPU work in `step`) stalls every episode, and
no timeout can fire meanwhile, so from outside the run just looks hung. A thread notices the
loop has not run for a while and says where it is stuck."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from agenthub._tracebacks import blamed

logger = logging.getLogger("agenthub.agents")  # the episodes are what a blocked loop stalls

BEAT_S = 0.25


def _log_stall(quiet_s: float, where: str) -> None:
    logger.warning(
        "the event loop has not run for %.0f s: %s blocks it, and every episode waits (no "
        "timeout can fire meanwhile). Environments must not block: run blocking work with "
        "`await anyio.to_thread.run_sync(...)` or use an async client.",
        quiet_s,
        where,
    )


@asynccontextmanager
async def loop_watchdog(
    after_s: float = 10.0,
    stalled: Callable[[float, str], None] = _log_stall,
    log: logging.Logger = logger,
) -> AsyncIterator[None]:
    """While inside, call `stalled` each time the loop goes `after_s` without running, with how
    long it has been and the line it is stuck on (`file:line in f (code)`), on the watchdog's
    own thread; by default it logs a warning. A warning on `log` follows when the loop runs
    again, with how long it was held."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio, under anyio): no watchdog
        yield
        return
    loop_thread = threading.get_ident()
    # Beats finer than `after_s`, so that a loop which only waits is never taken for a held one.
    beat_s = max(0.005, min(BEAT_S, after_s / 4))
    answered = time.monotonic()
    done = threading.Event()

    def ran() -> None:  # on the loop, whenever it gets to run
        nonlocal answered
        answered = time.monotonic()

    def ping() -> float:
        sent = time.monotonic()
        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(ran)
        return sent

    def watch() -> None:
        # The loop is held from the moment a ping goes unanswered: measured from the ping, not
        # from the last answer, which an idle loop gives up to a beat before the next ping.
        sent, reported = ping(), False
        while not done.wait(beat_s):
            if answered >= sent:
                if reported:
                    log.warning("the event loop runs again after %.0f s", answered - sent)
                sent, reported = ping(), False
            elif not reported and (quiet := time.monotonic() - sent) > after_s:
                reported = True
                stalled(quiet, _where(loop_thread))

    watcher = threading.Thread(target=watch, name="agenthub-loop-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()  # the thread ends within a beat; joining it here would hold the loop


def _where(thread: int) -> str:
    """The frame of `thread` to look at, as `file:line in f (code)`: the user's own innermost
    (`agenthub._tracebacks.blamed`), else the innermost outside the standard library."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return "something"
    stack = traceback.extract_stack(frame)
    index = blamed([(f.filename, f.lineno or 0, f.name) for f in stack])
    if index is None:
        library = (sys.prefix, sys.base_prefix)
        own = [f for f in stack if not f.filename.startswith(library) or "-packages" in f.filename]
        at = (own or stack)[-1]
    else:
        at = stack[index]
    return f"{at.filename}:{at.lineno} in {at.name} ({(at.line or '').strip()})"
