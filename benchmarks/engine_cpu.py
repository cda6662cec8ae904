"""Rollout throughput on a CPU machine: vLLM's own CPU set-up against agenthub's.

vLLM's CPU default runs the model in a worker process beside the engine core, and the two hand
every step to each other through a shared-memory queue whose reader spins for a second after
each message. On a machine without a GPU the in-process engine runs the model in the engine
core's process instead (vLLM's single-process executor), so the cores go to the model, the
sandboxed programs and the learner. This runs the same code_exec episodes (the embedded default
model, held-out tasks, the Docker sandbox, training's sampling settings) both ways, each in a
fresh process, alternating, and reports episodes per second, the machine's CPU use and how
long the sandboxed programs took. The last line is agenthub's episodes/s over vLLM's own set-up
(target > 1).

    python benchmarks/engine_cpu.py [--tasks 16] [--samples 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import psutil

VLLM_OWN = "mp"  # what vLLM's CPU platform picks: a worker process beside the engine core


async def child(args: argparse.Namespace) -> dict[str, float]:
    import itertools

    from agenthub import make
    from agenthub.agents import (
        ChatTokenizer,
        EpisodeRunner,
        RolloutConfig,
        SamplingParams,
        VLLMEngine,
    )
    from agenthub.agents.default_model import ensure_default_model
    from agenthub.sandbox import _docker

    durations: list[float] = []
    run = _docker.DockerSandbox._exec

    async def timed(self, channel, payload, limits):  # type: ignore[no-untyped-def]
        result, recycle = await run(self, channel, payload, limits)
        durations.append(result.duration_s)
        return result, recycle

    _docker.DockerSandbox._exec = timed  # type: ignore[method-assign]

    model = ensure_default_model()
    tasks = list(itertools.islice(make("code_exec").tasks("held_out"), args.tasks))
    executor = {"distributed_executor_backend": args.executor} if args.executor else {}
    engine = VLLMEngine(model, max_num_seqs=args.concurrency, **executor)
    config = RolloutConfig(
        sampling=SamplingParams(max_tokens=160, temperature=1.0, seed=0),
        max_turns=3,
        concurrency=args.concurrency,
        n_samples_per_prompt=args.samples,
        seed=0,
    )
    runner = EpisodeRunner(engine, ChatTokenizer.from_pretrained(model), "code_exec", config)
    try:
        await runner.collect(tasks[:2])  # warm-up: the engine's first steps, the sandbox pool
        durations.clear()
        cpu_before, start = psutil.cpu_times(), time.perf_counter()
        episodes = 0
        for _ in range(args.rounds):
            episodes += len(await runner.collect(tasks))
        seconds = time.perf_counter() - start
        cpu_after = psutil.cpu_times()
    finally:
        await engine.aclose()
    busy = sum(cpu_after) - sum(cpu_before) - (cpu_after.idle - cpu_before.idle)
    return {
        "episodes_per_s": episodes / seconds,
        "seconds": seconds,
        "cpu_busy": busy / (seconds * (psutil.cpu_count() or 1)),
        "program_s": statistics.mean(durations) if durations else float("nan"),
    }


def measure(executor: str) -> dict[str, float]:
    """Run this script's child side (same arguments) in a fresh process with `executor`
    (empty: the engine's own choice)."""
    command = [sys.executable, __file__, "--child", f"--executor={executor}", *sys.argv[1:]]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--executor", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    print(f"{psutil.cpu_count()} cores; {args.tasks} code_exec tasks x {args.samples} episodes")
    sides = {"vLLM's CPU set-up": VLLM_OWN, "agenthub's": ""}
    totals: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    # Each side in a fresh process, twice, alternating (ABBA): the machine is shared.
    for name in [*sides, *reversed(sides)]:
        result = measure(sides[name])
        totals[name].append(result)
        print(
            f"{name}: {result['episodes_per_s']:.2f} episodes/s, "
            f"CPU {result['cpu_busy']:.0%} busy, sandboxed program {result['program_s']:.3f} s",
            flush=True,
        )
    rate = {
        name: statistics.mean(r["episodes_per_s"] for r in runs) for name, runs in totals.items()
    }
    ratio = rate["agenthub's"] / rate["vLLM's CPU set-up"]
    print(f"engine_cpu: episodes/s with agenthub's engine set-up / with vLLM's own = {ratio:.2f}")


if __name__ == "__main__":
    main()
