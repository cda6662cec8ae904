"""The weight-transfer rounds of one vLLM engine (`VLLMEngine`'s), and how a round cut off
part-way is repaired."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from agenthub._tracebacks import described
from agenthub.agents._errors import EngineError
from agenthub.agents._update_gate import UpdateGate

__all__ = ["TransferRounds"]


class TransferRounds:
    """Rounds (`start` .. `receive` .. `finish`) of vLLM's weight-transfer API on `llm`, an
    `AsyncLLM` whose requests pass `gate`; `stamp` sets the engine's policy version.

    A round that fails part-way (a peer of the transfer group died mid-broadcast, as when a
    rollout worker is lost during a weight sync) leaves weights that are neither the old nor
    the new ones. The engine is then `broken`, but repairable: its gate goes on holding the
    requests (those paused in flight stay paused, new ones wait), and once it has joined a
    new group (`join`) a whole round that completes loads every weight anew, lets the requests
    go on under that round's version and ends the broken state. Until then no request is
    served: the gate opens only at the end of a completed round, and `VLLMEngine.generate`
    refuses a request that finds the engine broken past the gate (one an outer round, a
    colocated engine's sleep, let through)."""

    def __init__(self, llm: Any, gate: UpdateGate, stamp: Callable[[int], None]) -> None:
        self.llm = llm
        self.gate = gate
        self.stamp = stamp
        self.incoming = 0  # the policy version of the round under way
        self.round: Literal["started", "received"] | None = None
        self.broken: str | None = None
        """Why the weights are unfit to serve: a round failed part-way and none has completed
        since."""
        self.rejoined = False  # a new group was joined since the round failed

    async def join(self, init_info: dict[str, Any]) -> None:
        """Join a (new) weight-transfer group, ending a round the trainer left between calls
        first (another engine of the old group died): the weights it holds, old or wholly
        received, stand under their own version, and the requests it held go on."""
        from agenthub.agents import _vllm_compat as compat

        if self.round is not None:
            await self.llm.finish_weight_update()
            if self.round == "received":
                self.stamp(self.incoming)
            self.round = None
            await self.gate.end()
        await compat.init_weight_transfer(self.llm, init_info)
        self.rejoined = self.broken is not None

    async def start(self, version: int) -> None:
        if self.broken is not None and not self.rejoined:
            raise EngineError(
                f"{self.broken}; a round on the group the failed one ran on cannot repair "
                "it: join a new weight-transfer group (init_weight_transfer) first"
            )
        await self.gate.begin()
        try:
            await self.llm.start_weight_update()
        except BaseException as exc:
            await self._fail(exc)
            raise
        self.incoming, self.round = version, "started"

    async def receive(self, update_info: dict[str, Any]) -> None:
        from agenthub.agents import _vllm_compat as compat

        try:
            await compat.update_weights(self.llm, update_info)
        except BaseException as exc:
            await self._fail(exc)
            raise
        self.round = "received"

    async def finish(self) -> None:
        try:
            await self.llm.finish_weight_update()
            self.stamp(self.incoming)
            self.broken, self.rejoined = None, False
            await self.gate.end()
        except BaseException as exc:
            await self._fail(exc)
            raise
        self.round = None

    async def _fail(self, exc: BaseException) -> None:
        self.round, self.rejoined = None, False
        self.broken = (
            f"a weight sync failed part-way ({described(exc)}), so the engine's weights are "
            "neither the old nor the new ones; it holds its requests until a new "
            "weight-transfer group sends it a whole round (a training run does so when it "
            "replaces a lost rollout worker; otherwise start a new engine, or resume the run "
            "from its last checkpoint with --resume)"
        )
        await self.gate.hold()
