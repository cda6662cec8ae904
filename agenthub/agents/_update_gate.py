"""What happens to an engine's requests while its weights are replaced (`VLLMEngine`'s)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

__all__ = ["UpdateGate", "WeightUpdate"]

WeightUpdate = Literal["keep", "drain"]
"""How a weight-update round treats the requests in flight: `keep` pauses them where they are
and resumes them on the new weights; `drain` lets them finish on the old weights first."""


class UpdateGate:
    """The requests of one vLLM `AsyncLLM` (`llm`) and its weight-update rounds.

    Every request runs inside `request()`. A round (`begin` .. `end`) holds new requests back
    until it ends. With `keep`, `begin` returns at once: vLLM pauses the requests in flight
    where they are (`pause_generation(mode="keep")`), and `end` drops every cached KV block,
    the paused requests' too, so they are recomputed on the new weights before they go on
    (`reset_prefix_cache(reset_running_requests=True)`), then resumes them. With `drain`,
    `begin` waits for the requests in flight to finish on the old weights, and `end` only
    drops the prefix cache. `fail` ends a round that failed part-way: paused requests are
    aborted (their callers see the engine's error, not a cut reply) and the held ones let
    through, to be refused by the engine. `hold` ends a round that failed part-way but may be
    repaired: the requests stay held (and paused) until a new round ends.

    Rounds nest: a round begun inside another (a weight sync while a colocated engine sleeps,
    `VLLMEngine.sleep`) neither pauses nor resumes anything; the outer round's `end` does."""

    def __init__(self, llm: Any, mode: WeightUpdate) -> None:
        self.llm = llm
        self.keep = mode == "keep"
        self._changed = asyncio.Condition()
        self._in_flight = 0
        self._updating = False
        self._paused = False
        self._depth = 0  # rounds begun and not ended: the outermost pauses and resumes

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """Run one request: it waits while a round is under way."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._updating)
            self._in_flight += 1
        try:
            yield
        finally:
            async with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    async def begin(self, *, drain: bool = False) -> None:
        """Start a round (`drain`: as `drain` rounds do, whatever the gate's mode)."""
        if self._depth:
            self._depth += 1
            return
        keep = self.keep and not drain
        try:
            async with self._changed:
                self._updating = True
                if not keep:
                    await self._changed.wait_for(lambda: self._in_flight == 0)
            if keep and not self._paused:  # paused still after a round `hold` ended
                await self.llm.pause_generation(mode="keep", clear_cache=False)
                self._paused = True
            self._depth = 1
        except BaseException:  # cancelled while draining, or vLLM did not pause: no round
            await self._release()
            raise

    async def end(self) -> None:
        """The new weights are loaded: requests go on (once the outermost round ends)."""
        if self._depth > 1:
            self._depth -= 1
            return
        await self.llm.reset_prefix_cache(reset_running_requests=self._paused)
        if self._paused:
            await self.llm.resume_generation()
            self._paused = False
        await self._release()

    async def fail(self) -> None:
        """The round failed part-way: paused requests are aborted, held ones let through."""
        try:
            if self._paused:
                await self.llm.pause_generation(mode="abort", clear_cache=False)
                self._paused = False
        finally:
            await self._release()

    async def hold(self) -> None:
        """The round failed part-way, to be repaired by a new one: it ends, but the requests
        stay held, and those in flight paused, until a new round ends."""
        self._depth = max(self._depth - 1, 0)

    async def release(self) -> None:
        """Let every held request through (the engine is closing: they find it closed)."""
        await self._release()

    async def _release(self) -> None:
        self._depth = 0
        async with self._changed:
            self._updating = False
            self._changed.notify_all()
