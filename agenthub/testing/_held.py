"""What of a stall of the event loop the code on it is to blame for.

A gap between two turns of the loop has three parts: the loop's thread running code (the env's,
or the collector's), the thread asleep in a synchronous call (`time.sleep`, a blocking read,
a lock such as the GIL), and the thread ready to run but waiting for a CPU. The last is the
machine's load, not the env's doing: on a busy 2-core machine it alone can hold a correct env
for half a second. Linux counts it per thread (`/proc/self/task/<tid>/schedstat`'s second
field, the scheduler's run-queue delay, in nanoseconds), so it can be taken out of the gap,
and what is left is what a quiet machine would have seen. A `time.sleep` is not run-queue
time (a sleeping thread is not runnable), and neither is CPU work, so both still count in full.

The garbage collector's passes on the loop's thread are forgiven too, measured by its own
hooks: their length depends on every object the process holds (a whole test suite's), not on
the call that happened to trigger them.

What is not forgiven: the loop's thread asleep waiting for the GIL while another thread that
holds it waits for a CPU. It cannot be told apart from a `time.sleep` from outside, and it is
short: a thread holds the GIL only while it runs Python code, and hands it over within
`sys.getswitchinterval()` (5 ms) of being asked once it runs.

Without `/proc` (macOS, Windows) the run-queue parts read as zero, and a gap counts in full.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

_TASKS = "/proc/self/task"


def _run_queue_s(tid: int | str) -> float:
    """Seconds thread `tid` of this process has spent ready to run but waiting for a CPU;
    0.0 where the system does not say."""
    try:
        with open(f"{_TASKS}/{tid}/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class HeldClock:
    """A clock for the calling thread (the event loop's) that advances only while the thread's
    own code holds it: wall time less its run-queue waits and less the garbage collector's
    passes on it. Use it as a context manager, so that the collector's hook is removed."""

    def __init__(self) -> None:
        self._ident = threading.get_ident()
        self._tid = threading.get_native_id()
        self._gc_s = 0.0
        self._gc_started: float | None = None

    def __enter__(self) -> HeldClock:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._ident:
            return
        if phase == "start":
            self._gc_started = time.monotonic()
        elif self._gc_started is not None:
            self._gc_s += time.monotonic() - self._gc_started
            self._gc_started = None

    def now(self) -> float:
        """Wall seconds (`time.monotonic`) less this thread's run-queue time and GC passes."""
        # The thread may be preempted between reading the clock and its counts, and the wait
        # would count on one side only: read until no wait came in between.
        waited = _run_queue_s(self._tid)
        for _ in range(10):
            wall = time.monotonic()
            waited, before = _run_queue_s(self._tid), waited
            if waited == before:
                break
        return wall - waited - self._gc_s
