"""Weight publishing: the learner may step again once the weights are sent, and rollouts are
admitted for a version only after its weights are sent, in the order versions were sent."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.trainer._publisher import WeightPublisher
from agenthub.trainer._workers import Admission
from tests._loop import settle


class _Cluster:
    """Sends that end when `sent` is set, admissions that end when `admitted` is; what
    happened, in order."""

    def __init__(self) -> None:
        self.sent, self.admitted = asyncio.Event(), asyncio.Event()
        self.log: list[str] = []
        self.fail_admission = False

    async def send_weights(self, version: int) -> float:
        self.log.append(f"send {version}")
        await self.sent.wait()
        self.log.append(f"sent {version}")
        return 0.5

    async def admit_version(self, version: int) -> None:
        self.log.append(f"admit {version}")
        await self.admitted.wait()
        if self.fail_admission:
            raise RuntimeError("the admission gate died")
        self.log.append(f"admitted {version}")


def test_the_learner_may_step_again_once_the_weights_are_sent_before_rollouts_are_admitted() -> (
    None
):
    async def scenario() -> None:
        cluster = _Cluster()
        publisher = WeightPublisher(cluster)  # type: ignore[arg-type]
        publisher.publish(1)
        waited = asyncio.create_task(publisher.wait())
        await settle()
        assert not waited.done()
        assert cluster.log == ["send 1"], "nothing admitted before the weights are sent"
        cluster.sent.set()
        await asyncio.wait_for(waited, 1)  # the learner's next step may start here
        assert publisher.sync_s == 0.5
        assert cluster.log == ["send 1", "sent 1", "admit 1"]
        fully = asyncio.create_task(publisher.wait(admitted=True))
        await settle()
        assert not fully.done()
        cluster.admitted.set()
        await asyncio.wait_for(fully, 1)
        assert cluster.log[-1] == "admitted 1"

    asyncio.run(scenario())


def test_a_failed_admission_stops_the_run_where_a_failed_sync_does() -> None:
    async def scenario() -> None:
        cluster = _Cluster()
        cluster.sent.set()
        cluster.fail_admission = True
        publisher = WeightPublisher(cluster)  # type: ignore[arg-type]
        await publisher.publish(1)
        publisher.check()  # still running: nothing to say
        cluster.admitted.set()
        await settle()
        with pytest.raises(RuntimeError, match="admission gate died"):
            publisher.check()
        assert await publisher.settle(1.0)
        publisher.check()  # seen and forgotten

    asyncio.run(scenario())


def test_admission_never_goes_back_to_an_older_version() -> None:
    async def scenario() -> None:
        gate = Admission(batch_groups=1, max_staleness=0)
        await gate.set_version(3)
        await gate.set_version(2)  # a late call for an older sync
        assert gate.stats()["version"] == 3

    asyncio.run(scenario())
