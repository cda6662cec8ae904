"""Trajectories per second through the Ray queue: batched `TrajectoryQueue` vs per-item.

A producer and a consumer coroutine move real `Trajectory` objects (1,024 tokens each: 256 of
prompt, 768 sampled) through a bounded `ray.util.queue.Queue` on a local Ray instance, first
one item per actor call (the baseline: `put_async`/`get_async`), then in batches with
`agenthub.trainer.TrajectoryQueue`. Prints both rates; the last line is batched / per-item.
The learner side of issue 6 asks for >= 2,000 trajectories/s batched.

    python benchmarks/trajectory_queue.py [--items 4000] [--batch 64] [--baseline-items 400]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from agenthub.agents import Trajectory
from agenthub.agents._trajectory import Timings


def make_trajectory(i: int, rng: random.Random) -> Trajectory:
    prompt, reply = 256, 768
    tokens = [rng.randrange(1500) for _ in range(prompt + reply)]
    return Trajectory(
        env="code_exec",
        task_id=f"train-{i}",
        tokens=tokens,
        loss_mask=[0] * prompt + [1] * reply,
        logprobs=[0.0] * prompt + [-rng.random() for _ in range(reply)],
        policy_versions=[0] * prompt + [3] * reply,
        step_rewards=[0.0, 1.0],
        reward=1.0,
        score=1.0,
        terminated=True,
        truncated=False,
        num_turns=2,
        timings=Timings(generate_s=1.0, env_s=0.1, total_s=1.1),
    )


async def per_item(items: list[Trajectory]) -> float:
    from ray.util.queue import Queue

    queue = Queue(maxsize=256)
    start = time.perf_counter()

    async def produce() -> None:
        for item in items:
            await queue.put_async(item)

    async def consume() -> None:
        for _ in items:
            await queue.get_async()

    await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - start
    queue.shutdown()
    return len(items) / elapsed


async def batched(items: list[Trajectory], batch: int) -> float:
    from agenthub.trainer import TrajectoryQueue

    queue: TrajectoryQueue[Trajectory] = TrajectoryQueue(maxsize=4 * batch)
    start = time.perf_counter()

    async def produce() -> None:
        for i in range(0, len(items), batch):
            await queue.put_batch(items[i : i + batch])

    async def consume() -> None:
        got = 0
        while got < len(items):
            got += len(await queue.get_batch(batch))

    await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - start
    queue.shutdown()
    return len(items) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--baseline-items", type=int, default=400)
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rng = random.Random(0)
    pool = [make_trajectory(i, rng) for i in range(256)]
    items = [pool[i % len(pool)] for i in range(args.items)]
    slow = asyncio.run(per_item(items[: args.baseline_items]))
    fast = asyncio.run(batched(items, args.batch))
    ray.shutdown()
    print(f"per-item Queue.put/get : {slow:8.0f} trajectories/s ({args.baseline_items} items)")
    print(
        f"TrajectoryQueue batches: {fast:8.0f} trajectories/s "
        f"({args.items} items, batch {args.batch}; target >= 2000)"
    )
    print(f"batched / per-item: {fast / slow:.1f}")


if __name__ == "__main__":
    main()
