"""Agent program overhead: the same multi-turn task played by an agent program through the
OpenAI-compatible endpoint vs by an env through the episode runner, same engine.

Both play `--turns` replies per episode: the env answers each reply with a short user
message; the program (an `openai` client loop) appends the reply and the same message and
calls again. What differs is only the program path's work: the `openai` client, HTTP over an
in-process ASGI transport, JSON, matching the history to the episode's segment, parsing the
reply. Runs alternate (runner, program, runner, program) and the last line is the program's
episodes per second divided by the runner's (target >= 0.8).

    python benchmarks/agent_program_overhead.py [--engine vllm|fake] [--episodes 128]

`--engine vllm` (the default) is in-process vLLM on the embedded default model (`--model`);
`--engine fake` generates at a fixed cost per request (`--fake-generate-s`; 0 measures the
endpoint's own cost against nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _models import resolve_model

from agenthub import Env, Message, Step, Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    FakeEngine,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    VLLMEngine,
)

TURNS = 3


class CountingEnv(Env[list[Message]]):
    """Answers each reply with "Go on."; ends after `turns` replies, reward 1."""

    def __init__(self, turns: int = TURNS) -> None:
        self.turns, self.turn = turns, 0

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.turn = 0
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        self.turn += 1
        done = self.turn >= self.turns
        return Step([Message(role="user", content="Go on.")], float(done), terminated=done)


async def counting_program(client: Any, task: Task) -> str:
    """The same episode as a program: the task's prompt, then "Go on." after each reply."""
    messages: list[Any] = [{"role": "user", "content": str(task.prompt)}]
    text = ""
    for turn in range(int(task.metadata.get("turns", TURNS))):
        reply = await client.chat.completions.create(model="m", messages=messages)
        text = str(reply.choices[0].message.content)
        messages.append(reply.choices[0].message)
        if turn < TURNS - 1:
            messages.append({"role": "user", "content": "Go on."})
    return text


def one(task: Task, result: Any) -> float:
    return 1.0


async def rate(runner: EpisodeRunner, tasks: list[Task]) -> tuple[float, int]:
    started = time.perf_counter()
    trajectories = await runner.collect(tasks)
    failed = [t.error for t in trajectories if t.error is not None]
    if failed:
        raise SystemExit(f"{len(failed)} episodes failed, first: {failed[0]}")
    generated = sum(t.num_generated_tokens for t in trajectories)
    return len(trajectories) / (time.perf_counter() - started), generated


async def bench(args: argparse.Namespace, model: Path) -> float:
    chat = ChatTokenizer.from_pretrained(model)
    engine: InferenceEngine
    if args.engine == "vllm":
        engine = VLLMEngine(model, max_num_seqs=args.concurrency)
    else:
        reply = [*chat.encode_text("Counting on: three, two, one."), chat.closing_ids[0]]
        engine = FakeEngine(
            lambda prompt: reply, stop_token_ids=chat.stop_token_ids, latency_s=args.fake_generate_s
        )
    config = RolloutConfig(
        sampling=SamplingParams(max_tokens=args.reply_tokens, seed=1),
        concurrency=args.concurrency,
        max_turns=TURNS,
    )
    tasks = [Task(id=f"t{i}", prompt="Count down from three.") for i in range(args.episodes)]
    direct = EpisodeRunner(engine, chat, "agent_program_overhead:CountingEnv", config)
    program = EpisodeRunner(
        engine,
        chat,
        "agenthub.envs.agent_program:AgentProgramEnv",
        config,
        env_kwargs={
            "program": "agent_program_overhead:counting_program",
            "reward": "agent_program_overhead:one",
        },
    )
    try:
        await rate(direct, tasks[:8])  # warm-up: engine graphs, template caches
        await rate(program, tasks[:8])
        runner_rates, program_rates = [], []
        for _ in range(args.rounds):
            runner_rates.append((await rate(direct, tasks))[0])
            program_rates.append((await rate(program, tasks))[0])
    finally:
        await engine.aclose()
    runner_rate = sum(runner_rates) / len(runner_rates)
    program_rate = sum(program_rates) / len(program_rates)
    print(f"engine: {args.engine}, {args.episodes} episodes x {TURNS} turns, {args.rounds} rounds")
    print(f"runner (env):          {runner_rate:.2f} episodes/s")
    print(f"program (endpoint):    {program_rate:.2f} episodes/s")
    return program_rate / runner_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["vllm", "fake"], default="vllm")
    parser.add_argument("--model", default="default", help="PATH, 'default' or 'tiny'")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reply-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fake-generate-s", type=float, default=0.02)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    with tempfile.TemporaryDirectory() as scratch:
        model = resolve_model(args.model, Path(scratch))
        ratio = asyncio.run(bench(args, model))
    print(f"agent_program_overhead: program / runner episodes/s = {ratio:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
