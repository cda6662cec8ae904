"""A vLLM general plugin (entry point group `vllm.general_plugins`): vLLM loads it in each of
its processes, the engine core and its workers included.

vLLM's engine core and its worker process hand each step to each other through a shared-memory
queue. A reader of that queue spins (`sched_yield` in a loop) for a whole second after every
message before it sleeps on a socket, so while episodes keep sending requests the worker, and
the engine core while the worker computes, each hold a core. On a GPU machine that buys latency
with cores nobody else needs. On a CPU machine the same cores run the model, the sandboxes and
the learner: measured on 2 cores, the spinning took about as much CPU as the model itself,
sandboxed programs took about twice as long and code_exec episodes ran at 0.55x the rate they
reach with the cap (`benchmarks/engine_spin.py`).

With `AGENTHUB_VLLM_SPIN_S` set (the in-process engine sets it on machines without a GPU) a
reader spins at most that long before it sleeps; the writer wakes a sleeping reader on every
message, so nothing is missed, a step only pays a wake-up. Unset, this plugin does nothing.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["SPIN_ENV", "register"]

SPIN_ENV = "AGENTHUB_VLLM_SPIN_S"
"""Longest a vLLM shared-memory queue reader spins before it sleeps, in seconds."""

_log = logging.getLogger(__name__)


def register() -> None:
    """Cap the spin of vLLM's shared-memory queue readers at `$AGENTHUB_VLLM_SPIN_S` seconds.
    Safe to call more than once, in any process; without the variable it does nothing."""
    value = os.environ.get(SPIN_ENV)
    if value is None:
        return
    try:
        spin_s = float(value)
    except ValueError:
        _log.warning("ignoring %s=%r: not a number of seconds", SPIN_ENV, value)
        return
    try:
        from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
    except ImportError:  # another vLLM layout: leave it as it is
        _log.debug("vLLM has no SpinCondition; %s has no effect", SPIN_ENV)
        return
    cap_spin(SpinCondition, max(0.0, spin_s))


def cap_spin(condition_class: Any, spin_s: float) -> None:
    """Make every `condition_class.wait` spin at most `spin_s` seconds (its readers keep their
    time of last read in `busy_loop_s`'s window; only the window shrinks)."""
    original = condition_class.wait
    original = getattr(original, "__wrapped__", original)

    def wait(self: Any, timeout_ms: int | None = None) -> None:
        if self.busy_loop_s > spin_s:
            self.busy_loop_s = spin_s
        original(self, timeout_ms)

    wait.__wrapped__ = original  # type: ignore[attr-defined]
    condition_class.wait = wait
