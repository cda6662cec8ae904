"""Learner idle time and wall time per step: asynchronous vs synchronous training, one process.

Runs `agenthub train` twice on the same env, model and config, in one process run: once
asynchronous (`algorithm.max_staleness`, default 1: rollouts keep playing while the learner
steps and weights sync) and once synchronous (`max_staleness=0`: every rollout waits for the
previous step's weights, the way lockstep trainers work). For each it reads the run's
metrics.jsonl and reports the learner's idle fraction (time waiting on the trajectory queue
over step time) and the mean wall time per step, leaving out the first steps (start-up),
and how busy the machine's CPUs were over each run: asynchronous training can only hide
rollout time behind learning (or the reverse) where the cores have room for both at once.
Targets: async idle fraction under 10%, async wall time per step at most 0.6x sync. The last
line is that ratio.

    python benchmarks/learner_idle.py [--env code_exec] [--steps 12] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import psutil

from agenthub.trainer._config import load_config
from agenthub.trainer._loop import Trainer
from agenthub.trainer._metrics import read_metrics


def run(mode: str, env: str, steps: int, staleness: int, overrides: list[str], out: Path) -> dict:
    config = load_config(
        [],
        [
            f"env={env}",
            f"run.max_steps={steps}",
            f"algorithm.max_staleness={staleness}",
            "eval.every=0",
            "run.wandb=disabled",
            f"run.checkpoint_every={steps}",
            *overrides,
        ],
    )
    print(f"[{mode}] training {steps} steps with max_staleness={staleness} ...", flush=True)
    psutil.cpu_percent(interval=None)  # starts the count; the next call reads the run's mean
    Trainer(config, out, log=lambda line: print(f"[{mode}] {line}", flush=True)).run()
    cpu_busy = psutil.cpu_percent(interval=None) / 100
    records = [r for r in read_metrics(out / "metrics.jsonl") if "train/reward" in r]
    measured = records[2:] if len(records) > 4 else records  # the first steps include warm-up
    step_s = statistics.mean(r["learner/step_s"] for r in measured)
    wait_s = statistics.mean(r["learner/wait_s"] for r in measured)
    result = {
        "mode": mode,
        "steps_measured": len(measured),
        "step_s": step_s,
        "idle_fraction": wait_s / step_s,
        "learn_s": statistics.mean(r["learner/learn_s"] for r in measured),
        "staleness_mean": statistics.mean(r["staleness/mean"] for r in measured),
        "reward": statistics.mean(r["train/reward"] for r in measured),
        # The rollout work behind a step: turns and tokens, and groups played but not trained
        # (too stale, or all scores equal).
        "mean_turns": statistics.mean(r["train/mean_turns"] for r in measured),
        "trained_tokens": statistics.mean(r["train/generated_tokens"] for r in measured),
        "rollout_tokens": statistics.mean(
            r["tokens_per_s"] * r["learner/step_s"] for r in measured
        ),
        "groups_stale": sum(r["groups/stale"] for r in measured),
        "groups_filtered": sum(r["groups/filtered"] for r in measured),
        "groups_trained": sum(r["groups/trained"] for r in measured),
        "cpu_busy": cpu_busy,
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="code_exec")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--staleness", type=int, default=1, help="max_staleness of the async run")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="learner-idle-") as tmp:
        sync = run("sync", args.env, args.steps, 0, args.overrides, Path(tmp) / "sync")
        asynchronous = run(
            "async", args.env, args.steps, args.staleness, args.overrides, Path(tmp) / "async"
        )
    print(
        f"learner idle: async {asynchronous['idle_fraction']:.1%} (target < 10%), "
        f"sync {sync['idle_fraction']:.1%}"
    )
    print(
        f"CPU busy over the run ({psutil.cpu_count()} cores): "
        f"async {asynchronous['cpu_busy']:.0%}, sync {sync['cpu_busy']:.0%}"
    )
    print(
        f"wall time per step: async {asynchronous['step_s']:.2f} s, sync {sync['step_s']:.2f} s "
        "(target: async <= 0.6x sync)"
    )
    for name, run_ in (("async", asynchronous), ("sync", sync)):
        played = run_["groups_trained"] + run_["groups_stale"] + run_["groups_filtered"]
        print(
            f"rollout work per step, {name}: {run_['rollout_tokens']:.0f} tokens generated, "
            f"{run_['trained_tokens']:.0f} trained, {run_['mean_turns']:.2f} turns an episode; "
            f"groups not trained: {run_['groups_stale']} stale, {run_['groups_filtered']} "
            f"all-equal (of {played})"
        )
    print(f"async/sync wall time per step: {asynchronous['step_s'] / sync['step_s']:.2f}")


if __name__ == "__main__":
    main()
