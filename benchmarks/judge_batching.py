"""Reward-model judging throughput: concurrent episodes batched into few requests vs one
request per sample, against a real `agenthub serve-rm` on loopback.

Both runs play the same number of judge-env episodes (reward-model mode) with the same
concurrency; only `max_batch_size` differs (64 vs 1). The last line is the ratio of samples
per second (target >= 3).

    python benchmarks/judge_batching.py [--samples 2000] [--concurrency 128]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

from agenthub import Task, make

REWARD_FILE = """
def reward_func(queries, prompts, labels):
    return [float(len(q) - len(p)) for q, p in zip(queries, prompts)]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(url: str, samples: int, concurrency: int, batch: int) -> float:
    limiter = anyio.Semaphore(concurrency)
    rewards: list[float] = []

    async def episode(i: int) -> None:
        async with limiter:
            env = make("judge", rm_url=url, max_batch_size=batch, cache_size=0, timeout_s=60)
            await env.reset(Task(id=str(i), prompt="p", label=None))
            rewards.append((await env.step("x" * (i % 50))).reward)
            await env.aclose()

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for i in range(samples):
            group.start_soon(episode, i)
    elapsed = time.perf_counter() - start
    assert sorted(rewards) == sorted(float(i % 50) for i in range(samples)), "wrong rewards"
    return samples / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reward_file = Path(tmp) / "reward.py"
        reward_file.write_text(REWARD_FILE)
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agenthub",
                "serve-rm",
                "--reward-func",
                str(reward_file),
                "--port",
                str(port),
            ]
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"{base}/health", timeout=2).raise_for_status()
                    break
                except httpx.HTTPError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("serve-rm did not start") from None
                    time.sleep(0.1)
            url = f"{base}/get_reward"
            anyio.run(run, url, 200, args.concurrency, 64)  # warm up both sides
            batched = anyio.run(run, url, args.samples, args.concurrency, 64)
            single = anyio.run(run, url, args.samples, args.concurrency, 1)
            health = httpx.get(f"{base}/health", timeout=10).json()
        finally:
            server.terminate()
            server.wait(30)
    print(f"server saw {health['requests']} requests in {health['batches']} scoring batches")
    print(f"batched (up to 64 per request): {batched:.0f} samples/s")
    print(f"one request per sample:         {single:.0f} samples/s")
    print(f"batching speed-up: {batched / single:.2f}x (target >= 3)")


if __name__ == "__main__":
    main()
