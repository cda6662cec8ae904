"""Asynchronous episodes vs a turn-synchronous batched loop, with heavy-tailed env latency.

Every episode has `turns` replies; each env step sleeps a lognormal time with mean 100 ms
(drawn from the env's seeded generator, so both loops see the same latencies). The
asynchronous side is agenthub's `EpisodeRunner`: each episode moves on as soon as its own
step returns, and a new episode starts whenever one finishes. The lockstep side is how
synchronous trainers roll out: a batch of `concurrency` episodes generates together, steps
together, and every turn waits for the batch's slowest step. Same engine, same sessions, same
envs. The last line is the throughput ratio in episodes per second (target >= 3).

    python benchmarks/async_vs_lockstep.py [--model PATH|default|tiny] [--episodes 256]

On a CPU shared with other work, generation itself is the bottleneck and bounds the ratio;
`--engine fake` replaces vLLM by generation at a fixed cost per request to show the effect of
env latency alone.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from _models import resolve_model

import agenthub
from agenthub import Env, Message, Step, Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    FakeEngine,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Session,
    VLLMEngine,
)


class HeavyTailEnv(Env[list[Message]]):
    """Each step takes a lognormal time with mean `mean_s`; ends after `turns` steps."""

    def __init__(self, turns: int = 4, mean_s: float = 0.1, sigma: float = 1.5) -> None:
        self.turns, self.sigma = turns, sigma
        self.mu = math.log(mean_s) - sigma**2 / 2
        self.turn = 0

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        # Latencies depend on the task only, so both loops sleep through identical ones.
        self.reseed(int(task.id.removeprefix("t")))
        self.turn = 0
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        await asyncio.sleep(float(self.np_random.lognormal(self.mu, self.sigma)))
        self.turn += 1
        done = self.turn >= self.turns
        return Step([Message(role="user", content="Next.")], 0.0, terminated=done)


async def lockstep(
    engine: InferenceEngine,
    chat: ChatTokenizer,
    tasks: list[Task],
    config: RolloutConfig,
    env_kwargs: dict[str, Any],
) -> int:
    """Batches of `concurrency` episodes; each turn waits for the whole batch."""
    sampling = config.sampling.replace(stop_token_ids=chat.stop_token_ids)
    finished = 0
    for at in range(0, len(tasks), config.concurrency):
        batch = tasks[at : at + config.concurrency]
        envs = [HeavyTailEnv(**env_kwargs) for _ in batch]
        sessions = []
        for env, task in zip(envs, batch, strict=True):
            observation, _ = await env.reset(task)
            sessions.append(Session.start(chat, task, observation))
        live = list(range(len(batch)))
        for _ in range(config.max_turns):
            generations = await asyncio.gather(
                *(engine.generate(sessions[i].tokens, sampling) for i in live)
            )
            replies = zip(live, generations, strict=True)
            actions = [sessions[i].add_generation(g) for i, g in replies]
            moves = zip(live, actions, strict=True)
            steps = await asyncio.gather(*(envs[i].step(a) for i, a in moves))
            still = []
            for i, step in zip(live, steps, strict=True):
                if step.done:
                    finished += 1
                else:
                    sessions[i].add_observation(step.observation, engine.policy_version)
                    still.append(i)
            live = still
            if not live:
                break
    return finished


async def bench(args: argparse.Namespace, model: Path) -> float:
    agenthub.register("bench-heavy-tail", f"{__name__}:HeavyTailEnv", override=True)
    env_kwargs = {"turns": args.turns, "mean_s": 0.1, "sigma": args.sigma}
    chat = ChatTokenizer.from_pretrained(model)
    engine: InferenceEngine
    if args.engine == "vllm":
        engine = VLLMEngine(model, max_model_len=1024, max_num_seqs=args.concurrency)
    else:
        # Generation at a fixed cost per request, as on an accelerator that is not the
        # bottleneck: isolates what waiting on the env costs each loop.
        reply = chat.encode_text("a" * args.reply_tokens)[: args.reply_tokens]
        engine = FakeEngine(lambda prompt: reply, latency_s=args.fake_generate_s)
    config = RolloutConfig(
        sampling=SamplingParams(max_tokens=args.reply_tokens, seed=0),
        max_turns=args.turns,
        concurrency=args.concurrency,
    )
    runner = EpisodeRunner(engine, chat, "bench-heavy-tail", config, env_kwargs=env_kwargs)
    tasks = [
        Task(id=f"t{i}", prompt=f"Task number {i}: say something.") for i in range(args.episodes)
    ]
    try:
        await runner.collect(tasks[: args.concurrency // 4])  # warm-up
        start = time.perf_counter()
        done = await runner.collect(tasks)
        async_s = time.perf_counter() - start
        start = time.perf_counter()
        lock_done = await lockstep(engine, chat, tasks, config, env_kwargs)
        lock_s = time.perf_counter() - start
    finally:
        await engine.aclose()
    assert len(done) == lock_done == len(tasks)
    async_rate, lock_rate = len(done) / async_s, lock_done / lock_s
    print(f"async (EpisodeRunner): {len(done)} episodes in {async_s:.2f} s = {async_rate:.2f}/s")
    print(f"lockstep batches:      {lock_done} episodes in {lock_s:.2f} s = {lock_rate:.2f}/s")
    return async_rate / lock_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="PATH, 'default' or 'tiny'")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--reply-tokens", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sigma", type=float, default=1.5, help="lognormal shape of latency")
    parser.add_argument(
        "--engine",
        choices=["vllm", "fake"],
        default="vllm",
        help="vllm: in-process vLLM (the figure to report); fake: generation at a fixed cost "
        "per request (--fake-generate-s), to see the env-latency effect alone",
    )
    parser.add_argument("--fake-generate-s", type=float, default=0.02)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = resolve_model(args.model, Path(scratch))
        ratio = asyncio.run(bench(args, model))
    print(f"async_vs_lockstep: async / lockstep episodes per second = {ratio:.2f} (target >= 3)")


if __name__ == "__main__":
    main()
