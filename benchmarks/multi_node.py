"""The overhead of a run whose learner is on another Ray node than its driver, against the same
run on one node.

Trains `--steps` steps of `code_exec` on the embedded default model twice with the same small
settings: once as a plain `agenthub train` (Ray started on this machine, one node), once with
`--ray-address` on a real two-node cluster started on this machine (`ray start --head` and
`ray start --address`, the second node in a mount namespace that hides the model copy and the
run directory), the rollout worker on the head and the learner on the second node, so the
model reaches the learner through Ray's object store and every checkpoint and exported model
(`run.checkpoint_every`) comes back through it. Reports each run's steps/s after its first
step (from `metrics.jsonl`'s `time_s`) and its wall time, start-up included. Both nodes share
this machine: what is measured is Ray's and agenthub's overhead for the nodes, not a network.
The last line is the two-node steps/s over the one-node steps/s.

    python benchmarks/multi_node.py [--steps 6] [--checkpoint-every 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agenthub.testing._ray_nodes import HEAD, SECOND, ray_env, two_nodes  # noqa: E402

SMALL = [
    "--env", "code_exec", "rollout.n_samples_per_prompt=4", "rollout.concurrency=16",
    "rollout.max_turns=2", "rollout.max_reply_tokens=96", "algorithm.batch_groups=2",
    "algorithm.max_staleness=1", "algorithm.filter_groups=false", "eval.every=0",
    "run.wandb=disabled",
]  # fmt: skip


def train(out: Path, model: Path, steps: int, *args: str) -> tuple[float, float]:
    """One run to its end; its steps/s after the first step and its wall seconds."""
    command = [sys.executable, "-m", "agenthub", "train", "--out", str(out), "--model", str(model)]
    started = time.perf_counter()
    result = subprocess.run(
        [*command, "--steps", str(steps), *SMALL, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env=ray_env() | {"WANDB_SILENT": "true"},
        check=False,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"the run in {out} failed:\n{result.stderr[-4000:]}")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    times = [r["time_s"] for r in map(json.loads, lines) if "train/reward" in r]
    return (len(times) - 1) / (times[-1] - times[0]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpoint-every", type=int, default=2)
    args = parser.parse_args()
    from agenthub.agents._engines import resolve_model

    default = resolve_model("default", needed=True)
    assert default is not None
    every = f"run.checkpoint_every={args.checkpoint_every}"
    with tempfile.TemporaryDirectory() as scratch:
        hidden = Path(scratch) / "driver"
        model = hidden / "model"
        shutil.copytree(default, model)
        one_rate, one_wall = train(hidden / "one-node", model, args.steps, every)
        print(f"one node: {one_rate:.4f} steps/s after the first step, {one_wall:.0f} s in all")
        with two_nodes(hidden) as nodes:
            placing = [
                f"ray.learner_resources={json.dumps({SECOND: 1})}",
                f"ray.worker_resources={json.dumps({HEAD: 1})}",
            ]
            where = ["--ray-address", nodes.address, every, *placing]
            two_rate, two_wall = train(hidden / "two-nodes", model, args.steps, *where)
        print(
            f"two nodes (learner on the second): {two_rate:.4f} steps/s after the first step, "
            f"{two_wall:.0f} s in all"
        )
    print(f"two-node / one-node steps/s: {two_rate / one_rate:.2f}")


if __name__ == "__main__":
    main()
