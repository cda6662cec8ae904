"""TrajectoryQueue on a real local Ray instance."""

import os
import signal
from collections.abc import Iterator

import anyio
import pytest

ray = pytest.importorskip("ray", reason="the trainer needs the train extra")

from agenthub.trainer import TrajectoryQueue  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


async def test_batches_cross_in_order_and_fullness_pushes_back(local_ray: None) -> None:
    queue: TrajectoryQueue[dict[str, int]] = TrajectoryQueue(maxsize=4)
    await queue.put_batch([{"i": 0}, {"i": 1}, {"i": 2}])
    with pytest.raises(TimeoutError, match="stayed full"):
        await queue.put_batch([{"i": 3}, {"i": 4}], timeout_s=0.2)
    assert [x["i"] for x in await queue.get_batch(2)] == [0, 1]
    await queue.put_batch([{"i": 3}, {"i": 4}])
    assert [x["i"] for x in await queue.get_batch(10)] == [2, 3, 4]
    with pytest.raises(TimeoutError, match="no trajectory arrived"):
        await queue.get_batch(1, timeout_s=0.2)
    with pytest.raises(ValueError, match="can never fit"):
        await queue.put_batch([{"i": 0}] * 5)
    queue.shutdown()


async def test_a_blocked_producer_resumes_when_the_consumer_takes(local_ray: None) -> None:
    queue: TrajectoryQueue[int] = TrajectoryQueue(maxsize=8)
    got: list[int] = []

    async def produce() -> None:
        for start in range(0, 40, 4):
            await queue.put_batch(list(range(start, start + 4)), timeout_s=30)

    async def consume() -> None:
        while len(got) < 40:
            got.extend(await queue.get_batch(5, timeout_s=30))
            await anyio.sleep(0.01)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            group.start_soon(consume)
    assert got == list(range(40))
    queue.shutdown()


@ray.remote(num_cpus=0)
class _Producer:
    """A rollout worker's side of the queue, in a process of its own."""

    async def put(self, queue: TrajectoryQueue[int], items: list[int]) -> int:
        await queue.put_batch(items)
        return os.getpid()


async def test_the_batches_of_a_dead_producer_outlive_it(local_ray: None) -> None:
    queue: TrajectoryQueue[int] = TrajectoryQueue(maxsize=8)
    await queue.put_batch([0, 1])
    producer = _Producer.remote()  # type: ignore[attr-defined]
    pid = await producer.put.remote(queue, [2, 3, 4])
    await queue.put_batch([5])
    os.kill(pid, signal.SIGKILL)  # as a lost worker's process: what it queued is the queue's
    with anyio.fail_after(60):
        with pytest.raises(ray.exceptions.RayActorError):
            await producer.__ray_ready__.remote()
        await anyio.sleep(5)  # the owner's death reaches those who hold its objects a bit later
        assert await queue.snapshot() == [0, 1, 2, 3, 4, 5], "read, not taken"
        assert await queue.get_batch(10) == [0, 1, 2, 3, 4, 5]
    queue.shutdown()
