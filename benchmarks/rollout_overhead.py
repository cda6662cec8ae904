"""Rollout overhead: episodes through agenthub vs raw engine `generate`, same engine.

Runs multi-turn episodes of a zero-latency environment through `EpisodeRunner` on one
in-process vLLM engine, then replays exactly the same requests (each episode's prompts, in
order, with the same token counts) straight through `engine.generate` at the same concurrency.
What differs is only agenthub's work: making envs, sessions, chat-template rendering of the
env's messages, decoding, trajectories. The last line is agenthub's throughput in generated
tokens per second divided by the raw engine's, over alternating rounds (target >= 0.95).

    python benchmarks/rollout_overhead.py [--model PATH|default|tiny] [--episodes 64]
"""

from __future__ import annotations

import argparse
import asyncio
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
    RolloutConfig,
    SamplingParams,
    Trajectory,
    VLLMEngine,
)


class ZeroLatencyEnv(Env[list[Message]]):
    """Answers every reply at once with a short message; ends after `turns` replies."""

    def __init__(self, turns: int = 3) -> None:
        self.turns = turns
        self.turn = 0

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.turn = 0
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        self.turn += 1
        done = self.turn >= self.turns
        return Step([Message(role="user", content=f"Go on ({self.turn}).")], 0.0, terminated=done)


def requests_of(t: Trajectory) -> list[tuple[list[int], int]]:
    """Each generation of an episode: the prompt it was given and how many tokens it made."""
    out: list[tuple[list[int], int]] = []
    i = 0
    while i < len(t.tokens):
        if t.loss_mask[i]:
            j = i
            while j < len(t.tokens) and t.loss_mask[j]:
                j += 1
            out.append((t.tokens[:i], j - i))
            i = j
        else:
            i += 1
    return out


async def through_agenthub(
    runner: EpisodeRunner, tasks: list[Task]
) -> tuple[float, int, list[Trajectory]]:
    start = time.perf_counter()
    trajectories = await runner.collect(tasks)
    elapsed = time.perf_counter() - start
    return elapsed, sum(t.num_generated_tokens for t in trajectories), trajectories


async def through_raw_engine(
    engine: VLLMEngine, episodes: list[list[tuple[list[int], int]]], concurrency: int
) -> tuple[float, int]:
    limit = asyncio.Semaphore(concurrency)

    async def episode(requests: list[tuple[list[int], int]]) -> int:
        made = 0
        async with limit:
            for prompt, n in requests:
                g = await engine.generate(prompt, SamplingParams(max_tokens=n, seed=0))
                made += len(g.token_ids)
        return made

    start = time.perf_counter()
    made = await asyncio.gather(*(episode(e) for e in episodes))
    return time.perf_counter() - start, sum(made)


async def bench(args: argparse.Namespace, model: Path) -> float:
    agenthub.register("bench-zero-latency", f"{__name__}:ZeroLatencyEnv", override=True)
    chat = ChatTokenizer.from_pretrained(model)
    # No prefix cache: the raw replay would otherwise reuse the prefills agenthub computed.
    engine = VLLMEngine(
        model, max_model_len=1024, max_num_seqs=args.concurrency, enable_prefix_caching=False
    )
    config = RolloutConfig(
        sampling=SamplingParams(max_tokens=args.reply_tokens, seed=0),
        max_turns=args.turns,
        concurrency=args.concurrency,
    )
    runner = EpisodeRunner(
        engine, chat, "bench-zero-latency", config, env_kwargs={"turns": args.turns}
    )
    tasks = [
        Task(id=f"t{i}", prompt=f"Task number {i}: say something.") for i in range(args.episodes)
    ]
    try:
        # Warm-up, and the requests the raw side replays: seeds are derived per task, sample
        # and turn, so every agenthub round makes exactly these generations again.
        _, _, trajectories = await through_agenthub(runner, tasks)
        episodes = [requests_of(t) for t in trajectories]
        totals = {"agenthub": [0.0, 0], "raw": [0.0, 0]}
        for round_ in range(args.rounds):
            # The machine is shared, so the two sides alternate which goes first (ABBA).
            order = ["agenthub", "raw"] if round_ % 2 == 0 else ["raw", "agenthub"]
            for side in order:
                if side == "agenthub":
                    seconds, tokens, _ = await through_agenthub(runner, tasks)
                else:
                    seconds, tokens = await through_raw_engine(engine, episodes, args.concurrency)
                totals[side][0] += seconds
                totals[side][1] += tokens
                print(
                    f"round {round_ + 1} {side}: {tokens} tokens in {seconds:.2f} s "
                    f"({tokens / seconds:.0f} tok/s)"
                )
        hub_s, hub_tokens = totals["agenthub"]
        raw_s, raw_tokens = totals["raw"]
        print(
            f"agenthub: {hub_tokens / hub_s:.0f} tok/s, {args.rounds * len(tasks) / hub_s:.2f} "
            f"episodes/s; raw generate: {raw_tokens / raw_s:.0f} tok/s"
        )
        return (hub_tokens / hub_s) / (raw_tokens / raw_s)
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="PATH, 'default' or 'tiny'")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = resolve_model(args.model, Path(scratch))
        ratio = asyncio.run(bench(args, model))
    print(f"rollout_overhead: agenthub / raw engine throughput = {ratio:.3f} (target >= 0.95)")


if __name__ == "__main__":
    main()
