"""Where an end-to-end test holds a process of a real `agenthub train` run still, to kill it at
a chosen moment rather than race it with sleeps. Off unless the test sets the environment
variable (the run's Ray actors on the driver's machine inherit the driver's environment); no
setting of the run turns it on.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

__all__ = ["HOLD_IN_SYNC", "hold_in_sync"]

HOLD_IN_SYNC = "AGENTHUB_TEST_HOLD_IN_SYNC"
"""`RANK:VERSION:FILE`: rollout worker RANK (its first life, not a replacement), once its engine
has received the weights of policy VERSION, writes its process id to FILE and holds the weight
sync there (the learner waits between two calls of its round) until the test kills it."""

HOLD_S = 600.0
"""How long the hold lasts at most: a test that never kills the worker fails the sync then."""


async def hold_in_sync(rank: int, life: int, version: int) -> None:
    """Hold here if `HOLD_IN_SYNC` names this worker and version; else return at once."""
    asked = os.environ.get(HOLD_IN_SYNC)
    if not asked or life:
        return
    held_rank, held_version, file = asked.split(":", 2)
    if (int(held_rank), int(held_version)) != (rank, version):
        return
    await asyncio.to_thread(_say_held, Path(file))
    await asyncio.sleep(HOLD_S)
    raise RuntimeError(f"{HOLD_IN_SYNC} held rollout worker {rank} for {HOLD_S:g} s: no kill came")


def _say_held(file: Path) -> None:
    """This process's id in `file`, whole when it appears (the test kills it then)."""
    part = file.with_name(f"{file.name}.part")
    part.write_text(str(os.getpid()))
    part.replace(file)
