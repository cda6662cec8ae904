"""Letting an event loop run whatever is ready, for tests of coroutines that wait on each other
(asyncio events, conditions and tasks, with no timer, I/O or thread in between)."""

from __future__ import annotations

import asyncio

TURNS = 50


async def settle(turns: int = TURNS) -> None:
    """Run `turns` turns of the loop, each running every callback ready: whatever the other
    tasks can do without a timer, an I/O or a thread is done when it returns (their chains
    take a few turns). Unlike a short sleep, it does not depend on the machine's speed: on a
    busy one, a 10 ms timer can fire before a chain of awaits has reached its end."""
    for _ in range(turns):
        await asyncio.sleep(0)
