"""An engine's weight-transfer rounds (`TransferRounds`, `VLLMEngine`'s) over an in-memory vLLM:
a round cut off part-way (a peer of the group died mid-broadcast) holds the requests until a
new group sends a whole round, which lets them go on under its version."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the weight-transfer requests are vLLM's")

from agenthub.agents._errors import EngineError
from agenthub.agents._transfer_rounds import TransferRounds
from agenthub.agents._update_gate import UpdateGate


class FakeLLM:
    """The calls a round makes of vLLM's `AsyncLLM`, recorded; a receive fails while `cut`
    says why."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.cut: str | None = None

    async def init_weight_transfer_engine(self, request: Any) -> None:
        self.calls.append(("join", request.init_info["group"]))

    async def start_weight_update(self) -> None:
        self.calls.append(("start", None))

    async def update_weights(self, request: Any) -> None:
        if self.cut is not None:
            raise RuntimeError(self.cut)
        self.calls.append(("receive", None))

    async def finish_weight_update(self) -> None:
        self.calls.append(("finish", None))

    async def pause_generation(self, *, mode: str, clear_cache: bool) -> None:
        self.calls.append(("pause", mode))

    async def resume_generation(self) -> None:
        self.calls.append(("resume", None))

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        self.calls.append(("reset", reset_running_requests))
        return True


class Engine:
    """The rounds and the requests of one engine, as `VLLMEngine` wires them."""

    def __init__(self) -> None:
        self.llm = FakeLLM()
        self.version = 0
        self.gate = UpdateGate(self.llm, "keep")
        self.rounds = TransferRounds(self.llm, self.gate, self.stamp)

    def stamp(self, version: int) -> None:
        self.version = version

    async def generate(self) -> int:
        """A request: the policy version that served it."""
        async with self.gate.request():
            if self.rounds.broken is not None:
                raise EngineError(self.rounds.broken)
            return self.version

    async def sync(self, version: int, group: int) -> None:
        await self.rounds.join({"group": group})
        await self.rounds.start(version)
        await self.rounds.receive({})
        await self.rounds.finish()


def test_a_round_cut_off_part_way_holds_the_requests_until_a_new_group_sends_a_whole_one() -> None:
    async def run() -> None:
        engine = Engine()
        await engine.sync(1, group=1)
        assert await engine.generate() == 1

        engine.llm.cut = "Connection closed by peer 10.0.0.2"
        with pytest.raises(RuntimeError, match="Connection closed"):
            await engine.sync(2, group=1)
        assert engine.rounds.broken is not None
        assert "failed part-way" in engine.rounds.broken
        assert "Connection closed by peer" in engine.rounds.broken
        held = asyncio.create_task(engine.generate())
        await asyncio.sleep(0.01)
        assert not held.done(), "half-updated weights must serve nothing"

        # The old group lost a peer: a round on it is refused, saying what to do.
        with pytest.raises(EngineError, match=r"join a new weight-transfer group"):
            await engine.rounds.start(2)

        # A second failure, on the new group, is reported with its own cause.
        engine.llm.cut = "Timed out waiting 120000ms for recv"
        with pytest.raises(RuntimeError, match="Timed out"):
            await engine.sync(2, group=2)
        assert "Timed out waiting" in engine.rounds.broken
        await asyncio.sleep(0.01)
        assert not held.done()

        engine.llm.cut = None
        engine.llm.calls.clear()
        await engine.rounds.join({"group": 3})
        await engine.rounds.start(2)
        await engine.rounds.receive({})
        await asyncio.sleep(0.01)
        assert not held.done(), "held until the round completes"
        await engine.rounds.finish()
        assert await held == 2
        assert await engine.generate() == 2
        assert engine.rounds.broken is None
        # Paused once, when the first failed round began: the requests it paused are
        # recomputed on the new weights and resumed.
        assert engine.llm.calls == [
            ("join", 3),
            ("start", None),
            ("receive", None),
            ("finish", None),
            ("reset", True),
            ("resume", None),
        ]

    asyncio.run(run())


def test_a_round_left_between_calls_is_ended_when_the_engine_joins_a_new_group() -> None:
    async def run() -> None:
        engine = Engine()
        await engine.rounds.join({"group": 1})
        await engine.rounds.start(1)
        await engine.rounds.receive({})  # another engine of the group died: no finish
        await engine.rounds.join({"group": 2})
        assert engine.rounds.broken is None
        assert await engine.generate() == 1, "its whole weights stand under their version"

    asyncio.run(run())
