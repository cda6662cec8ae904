"""Rollout throughput on a CPU machine with vLLM's own wait loop against agenthub's spin cap.

vLLM's engine core and its worker wait on each other by spinning for a second after every
message. On a machine without a GPU the in-process engine caps that spin (`CPU_SPIN_S`, through
the plugin in agenthub/agents/_vllm_plugin.py), so the cores go to the model, the sandboxed
programs and the learner instead. This runs the same code_exec episodes (the embedded default
model, held-out tasks, the Docker sandbox, training's sampling settings) with vLLM's spin
(`AGENTHUB_VLLM_SPIN_S=1`, what vLLM does by itself) and with agenthub's cap, each in a fresh
process, alternating, and reports episodes per second, the machine's CPU use and how long the
sandboxed programs took. The last line is agenthub's episodes/s over vLLM's own (target > 1).

    python benchmarks/engine_spin.py [--tasks 16] [--samples 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import psutil

from agenthub.agents._vllm import CPU_SPIN_S
from agenthub.agents._vllm_plugin import SPIN_ENV

VLLM_OWN_SPIN_S = 1.0  # vLLM's SpinCondition default


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
    engine = VLLMEngine(model, max_num_seqs=args.concurrency)
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


def measure(spin_s: float) -> dict[str, float]:
    """Run this script's child side (same arguments) in a fresh process with `spin_s`."""
    env = {**os.environ, SPIN_ENV: str(spin_s)}
    command = [sys.executable, __file__, "--child", *sys.argv[1:]]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    print(f"{psutil.cpu_count()} cores; {args.tasks} code_exec tasks x {args.samples} episodes")
    sides = {"vLLM's own spin": VLLM_OWN_SPIN_S, "agenthub's cap": CPU_SPIN_S}
    totals: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    # Each side in a fresh process, twice, alternating (ABBA): the machine is shared.
    for name in [*sides, *reversed(sides)]:
        result = measure(sides[name])
        totals[name].append(result)
        print(
            f"{name} ({SPIN_ENV}={sides[name]}): {result['episodes_per_s']:.2f} episodes/s, "
            f"CPU {result['cpu_busy']:.0%} busy, sandboxed program {result['program_s']:.3f} s",
            flush=True,
        )
    rate = {
        name: statistics.mean(r["episodes_per_s"] for r in runs) for name, runs in totals.items()
    }
    ratio = rate["agenthub's cap"] / rate["vLLM's own spin"]
    print(f"engine_spin: episodes/s with agenthub's cap / with vLLM's own spin = {ratio:.2f}")


if __name__ == "__main__":
    main()
