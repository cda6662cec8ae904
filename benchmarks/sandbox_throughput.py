"""Sandbox throughput: executions per second of a short Python program, one process run.

- docker: the warm pool (`DockerSandbox`) vs a cold `docker run` per execution, both with the
  same image and lock-down (no network, read-only root). Target: warm >= 3x cold.
- bwrap: `BwrapSandbox` vs a bare `python3 -c` subprocess. Target: bwrap >= 0.5x bare.

Runs are sequential, so the rates measure per-execution overhead, not parallel capacity.
The last line is one summary ratio: the worse of the two ratios divided by its target
(>= 1 means both targets are met).

    python benchmarks/sandbox_throughput.py [--runs N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable

import anyio

from agenthub.sandbox import IMAGE, BwrapSandbox, DockerSandbox, Limits, Sandbox
from agenthub.sandbox._docker import connect
from agenthub.sandbox._process import _python

CODE = "print(sum(i * i for i in range(1000)))"
EXPECTED = f"{sum(i * i for i in range(1000))}\n"


async def per_second(runs: int, one: Callable[[], Awaitable[None]]) -> float:
    await one()  # warm caches before timing
    start = time.perf_counter()
    for _ in range(runs):
        await one()
    return runs / (time.perf_counter() - start)


async def through(sandbox: Sandbox, runs: int) -> float:
    async def one() -> None:
        result = await sandbox.run(CODE)
        assert result.stdout == EXPECTED, result

    async with sandbox:
        return await per_second(runs, one)


async def cold_docker(runs: int) -> float:
    client = connect()

    def run() -> None:
        out = client.containers.run(
            IMAGE, ["python3", "-c", CODE], network_mode="none", read_only=True, remove=True
        )
        assert out.decode() == EXPECTED

    async def one() -> None:
        await anyio.to_thread.run_sync(run)

    try:
        return await per_second(runs, one)
    finally:
        client.close()


async def bare(runs: int) -> float:
    async def one() -> None:
        done = await anyio.run_process([_python(), "-c", CODE])
        assert done.stdout.decode() == EXPECTED

    return await per_second(runs, one)


async def main(runs: int) -> None:
    limits = Limits(timeout_s=30)
    warm = await through(DockerSandbox(pool_size=1, limits=limits), runs)
    cold = await cold_docker(max(3, runs // 4))
    docker_ratio = warm / cold
    print(f"docker warm pool   {warm:7.2f} exec/s")
    print(f"cold docker run    {cold:7.2f} exec/s")
    print(f"warm pool / cold docker run = {docker_ratio:.2f} (target >= 3)")
    isolated = await through(BwrapSandbox(limits=limits, concurrency=1), runs)
    plain = await bare(runs)
    bwrap_ratio = isolated / plain
    print(f"bwrap              {isolated:7.2f} exec/s")
    print(f"bare subprocess    {plain:7.2f} exec/s")
    print(f"bwrap / bare subprocess = {bwrap_ratio:.2f} (target >= 0.5)")
    summary = min(docker_ratio / 3, bwrap_ratio / 0.5)
    print(f"sandbox_throughput summary ratio (worse ratio over its target): {summary:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs per measurement")
    anyio.run(main, parser.parse_args().runs)
