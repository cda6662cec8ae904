"""An engine's requests during a weight-update round (`UpdateGate`), over an in-memory vLLM:
`keep` pauses the requests in flight and recomputes them on the new weights, `drain` waits for
them; requests that arrive during a round wait for its end either way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agenthub.agents._update_gate import UpdateGate, WeightUpdate
from tests._loop import settle


class FakeLLM:
    """The calls `UpdateGate` makes of vLLM's `AsyncLLM`, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def pause_generation(self, *, mode: str, clear_cache: bool) -> None:
        self.calls.append(("pause", mode))

    async def resume_generation(self) -> None:
        self.calls.append(("resume", None))

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        self.calls.append(("reset", reset_running_requests))
        return True


async def _request(gate: UpdateGate, done: asyncio.Event, log: list[str], name: str) -> None:
    async with gate.request():
        log.append(f"{name} started")
        await done.wait()
    log.append(f"{name} ended")


def _scenario(mode: WeightUpdate) -> tuple[FakeLLM, list[str]]:
    """A request in flight when a round begins, one that arrives during it; the log."""
    llm, log = FakeLLM(), []

    async def run() -> None:
        gate = UpdateGate(llm, mode)
        first_done, second_done = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(_request(gate, first_done, log, "first"))
        await asyncio.sleep(0)
        begun = asyncio.create_task(gate.begin())
        await settle()
        log.append("round begun" if begun.done() else "round waiting")
        second = asyncio.create_task(_request(gate, second_done, log, "second"))
        await settle()
        first_done.set()
        await begun
        log.append("weights loaded")
        await gate.end()
        second_done.set()
        await asyncio.gather(first, second)
        assert gate.in_flight == 0

    asyncio.run(run())
    return llm, log


def test_keep_pauses_the_requests_in_flight_and_recomputes_them_on_the_new_weights() -> None:
    llm, log = _scenario("keep")
    assert log[:2] == ["first started", "round begun"], "the round waited for no request"
    assert log.index("second started") > log.index("weights loaded"), "new ones wait"
    assert llm.calls == [("pause", "keep"), ("reset", True), ("resume", None)]


def test_drain_waits_for_the_requests_in_flight_and_pauses_nothing() -> None:
    llm, log = _scenario("drain")
    assert log[:3] == ["first started", "round waiting", "first ended"]
    assert log.index("second started") > log.index("weights loaded"), "new ones wait"
    assert llm.calls == [("reset", False)]


def test_a_round_that_must_drain_does_so_under_keep() -> None:
    llm = FakeLLM()

    async def run() -> None:
        gate = UpdateGate(llm, "keep")
        done = asyncio.Event()
        running = asyncio.create_task(_request(gate, done, [], "first"))
        await asyncio.sleep(0)
        begun = asyncio.create_task(gate.begin(drain=True))
        await settle()
        assert not begun.done()
        done.set()
        await begun
        await gate.end()
        await running

    asyncio.run(run())
    assert llm.calls == [("reset", False)]


def test_a_failed_round_aborts_the_paused_requests_and_lets_the_held_ones_through() -> None:
    llm = FakeLLM()
    log: list[str] = []

    async def run() -> None:
        gate = UpdateGate(llm, "keep")
        await gate.begin()
        held = asyncio.create_task(_request(gate, asyncio.Event(), log, "held"))
        await settle()
        assert log == []
        await gate.fail()
        await settle()
        assert log == ["held started"], "let through, for the engine to refuse"
        held.cancel()

    asyncio.run(run())
    assert llm.calls == [("pause", "keep"), ("pause", "abort")]


def test_a_drain_cancelled_part_way_leaves_no_round_behind() -> None:
    async def run() -> None:
        gate = UpdateGate(FakeLLM(), "drain")
        stuck = asyncio.create_task(_request(gate, asyncio.Event(), [], "stuck"))
        await asyncio.sleep(0)
        begun = asyncio.create_task(gate.begin())
        await settle()
        begun.cancel()
        with pytest.raises(asyncio.CancelledError):
            await begun
        log: list[str] = []
        done = asyncio.Event()
        done.set()
        await asyncio.wait_for(_request(gate, done, log, "next"), timeout=1)
        assert log == ["next started", "next ended"]
        stuck.cancel()

    asyncio.run(run())


def test_a_round_inside_another_neither_pauses_nor_resumes_and_requests_wait_for_the_outer() -> (
    None
):
    """A colocated engine's sleep holds its requests across the weight sync inside it."""
    llm, log = FakeLLM(), []

    async def run() -> None:
        gate = UpdateGate(llm, "keep")
        await gate.begin()  # the engine goes to sleep
        await gate.begin()  # the weight sync's round
        waiting = asyncio.create_task(_request(gate, asyncio.Event(), log, "held"))
        await settle()
        await gate.end()  # the sync's round ends: still asleep
        await settle()
        assert log == [] and llm.calls == [("pause", "keep")]
        await gate.end()  # awake
        await settle()
        assert log == ["held started"]
        waiting.cancel()

    asyncio.run(run())
    assert llm.calls == [("pause", "keep"), ("reset", True), ("resume", None)]
