"""Learner idle, throughput and async speed-up at 1-16 rollout workers, by simulation.

The real trainer orchestration (the `Trainer` loop, Ray actors, the bounded trajectory queue,
staleness admission, batch assembly and triage, weight publishing through vLLM's weight-sync
control plane) drives simulated engines and a simulated learner that only sleep
(`agenthub.trainer._sim`), so 2 cores host 16 workers. The model, in a real cluster's seconds:

- an engine decodes 32 sequences at once (rollout.concurrency) at 64 tokens/s each;
- an episode is 4 turns of a 256-token reply and an env step of lognormal latency (mean 2 s,
  sigma 1.0: the slowest 1% take over 12 s), a 512-token prompt and 64-token observations;
- a group is 8 episodes of a task, a learner step 8 groups (64 trajectories, 110,592 tokens)
  at 96 us per token (10.6 s);
- a weight sync moves 14e9 bytes (7B parameters in bf16) at 0.1 ns per byte (1.4 s); the
  engines pause their generations in flight for it and recompute their KV on the new weights
  at 32,000 prompt tokens/s before going on (`rollout.weight_update=keep`, the default), or
  with `--weight-update drain` let them finish first.

So one worker finishes 1.33 trajectories/s, the learner trains 5.3/s: 4 workers balance it.
Every sleep lasts 1/40 of the model's time (`--time-scale`); the figures below are in model
seconds. The simulated parts burn no CPU, so what the run's processes use (this one, Ray's
and every actor's) is the orchestration's own: its CPU time over the measured steps is
printed as cores busy.

What of the learner's time is no modelled time (its steps and transfers as the model says,
its waits for rollouts) is the orchestration's own latency: the engines pausing and resuming
for a sync under `keep` (`start`, `finish`), their answers inside a transfer, the driver's
round trips (`other`), a sleep ending late on a loaded machine. Those are real seconds, which
the time scale stretches 40-fold against the model's. The right-hand columns measure and
subtract that: they count it at the length it had on this machine rather than stretched, as
a cluster running the model's times at full speed would see it if its orchestration were no
faster than here (on 2 cores shared by every process of the run, it is slower than on a
cluster's). Under `drain` the sync's start is modelled time (generations finishing).

For each worker count, synchronous (`algorithm.max_staleness=0`) and asynchronous
(`--staleness`, 4 by default: a group takes 2-4 learner steps to finish here, its slowest
episode's four turns, so admission must let 3-5 batches' worth of groups be in flight; at
the default of 1 most groups wait for admission or come back too stale): learner idle
fraction, trajectories/s against the model's ideal `min(rollout capacity, learner
capacity)`, and the async/sync speed-up. Targets: learner idle < 10% once rollout
capacity exceeds the learner's by 20%; async >= 1.7x sync where they balance (2x is the
limit); efficiency >= 0.9 at 16 workers. The last line is the efficiency at the balance,
its last figure with the orchestration at real time.

    python benchmarks/cluster_sim.py [--workers 1,2,4,8,16] [--steps 14] [--weight-update drain]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

import agenthub
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._loop import Trainer
from agenthub.trainer._metrics import StepReport, read_metrics
from agenthub.trainer._sim import SimCluster, SimModel

BATCH_GROUPS, SAMPLES, CONCURRENCY = 8, 8, 32


@dataclass
class Point:
    workers: int
    staleness: int
    idle: float
    start: float
    """Of `idle`: the learner waiting for every engine to start a weight sync (to pause its
    generations in flight, or under `drain` to let them finish)."""
    finish: float
    """Of `idle`: the learner waiting for every engine to end a weight sync."""
    batch_wait: float
    """Of `idle`: the learner, free, waiting for its next batch."""
    per_s: float
    ideal: float
    rollout_capacity: float
    learner_capacity: float
    cpu_cores: float
    stale: float
    queued: float
    """Of the measured steps, the share that went to the learner behind the weight sync."""
    modelled: float
    """The learner's modelled time (its steps' and transfers' sleeps as asked), a share of
    the wall time; the rest of its busy time is the machine's lateness and the engines'
    answers to the transfer."""
    scale: float
    keep: bool
    """Whether engines keep their generations through a sync (`rollout.weight_update=keep`):
    then starting a sync takes no model time, only the orchestration's."""

    @property
    def other(self) -> float:
        """Of `idle`: the rest, between a sync's end and the next step (the driver's round
        trips: the sync's answer, the batch handed over)."""
        return self.idle - self.start - self.finish - self.batch_wait

    def at_real_time(self) -> tuple[float, float]:
        """Learner idle and trajectories per model second with what of the learner's time is
        no modelled time (its waits for the orchestration, the engines' answers inside a
        transfer, sleeps that ended late on a loaded machine) counted at the length it had
        here instead of stretched by 1 / time scale as the sleeps are: what a cluster running
        the model's times at full speed would see, its orchestration as slow as here. The
        faster learner then takes no more than the rollouts give: the workers' capacity less
        the groups that came back too stale."""
        waited = self.batch_wait + (0.0 if self.keep else self.start)  # for modelled times
        orchestration = 1 - self.modelled - waited  # shares of the wall time
        wall = (self.modelled + waited) / self.scale + orchestration
        per_s = self.per_s / self.scale / wall
        supply = self.rollout_capacity * (1 - self.stale)
        if per_s > supply:  # bound by the rollouts: the learner waits for them
            return 1 - supply / self.learner_capacity, supply
        return 1 - self.modelled / self.scale / wall, per_s


class _Window:
    """The measured steps: from the end of warm-up step `skip` to the last step, the wall time
    and the CPU time of this process and every one it started (Ray's and the actors')."""

    def __init__(self, skip: int, last: int) -> None:
        self.skip, self.last = skip, last
        self.start = self.end = 0.0
        self.cpu_start = self.cpu_end = 0.0

    def on_step(self, report: StepReport) -> None:
        if report.step == self.skip:
            self.start, self.cpu_start = time.monotonic(), _cpu_s()
        elif report.step == self.last:
            self.end, self.cpu_end = time.monotonic(), _cpu_s()

    def overlap(self, intervals: list[tuple[float, float]]) -> float:
        """How long `intervals` (`time.monotonic`) cover of the window."""
        return sum(max(0.0, min(b, self.end) - max(a, self.start)) for a, b in intervals)


def _cpu_s() -> float:
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # it ended meanwhile
            continue
        total += times.user + times.system
    return total


def run_point(
    model: SimModel,
    model_path: Path,
    workers: int,
    staleness: int,
    steps: int,
    skip: int,
    weight_update: str,
) -> Point:
    cfg = load_config(
        [],
        [
            "env=cluster-sim",
            f"rollout.weight_update={weight_update}",
            f"ray.rollout_workers={workers}",
            f"algorithm.max_staleness={staleness}",
            f"algorithm.batch_groups={BATCH_GROUPS}",
            f"rollout.n_samples_per_prompt={SAMPLES}",
            f"rollout.concurrency={CONCURRENCY}",
            "algorithm.filter_groups=false",
            "eval.every=0",
            "run.wandb=disabled",
            f"run.max_steps={steps}",
            f"run.checkpoint_every={steps}",
            "run.save_trajectories=0",
        ],
    )
    made: list[SimCluster] = []

    def cluster(c: TrainConfig, version: int, drawn: list[int]) -> SimCluster:
        made.append(SimCluster(c, model_path, version, drawn))
        return made[-1]

    window = _Window(skip, steps)
    with tempfile.TemporaryDirectory() as out:
        Trainer(cfg, Path(out), log=lambda _: None, on_step=window.on_step, cluster=cluster).run()
        records = [r for r in read_metrics(Path(out) / "metrics.jsonl") if "train/reward" in r]
    stale = sum(r["groups/stale"] for r in records)
    stale_share = stale / (stale + sum(r["groups/trained"] for r in records))
    wall = window.end - window.start
    busy = window.overlap(made[0].learner_busy)
    measured = [r for r in records if skip < r["step"] <= steps]
    waited = sum(r["learner/wait_s"] for r in measured)
    cpu = window.cpu_end - window.cpu_start
    trained = (steps - skip) * BATCH_GROUPS * SAMPLES
    scale = model.time_scale
    rollout_cap = model.rollout_capacity(workers, CONCURRENCY)
    learner_cap = model.learner_capacity(BATCH_GROUPS * SAMPLES)
    return Point(
        workers,
        staleness,
        idle=1 - busy / wall,
        start=window.overlap(made[0].learner_waited["start"]) / wall,
        finish=window.overlap(made[0].learner_waited["finish"]) / wall,
        batch_wait=waited / wall,
        per_s=trained / wall * scale,
        ideal=min(rollout_cap, learner_cap),
        rollout_capacity=rollout_cap,
        learner_capacity=learner_cap,
        cpu_cores=cpu / wall,
        stale=stale_share,
        queued=sum(r["learner/queued"] for r in measured) / len(measured),
        modelled=window.overlap(made[0].learner_modelled) / wall,
        scale=scale,
        keep=weight_update == "keep",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts to sweep")
    parser.add_argument("--steps", type=int, default=14, help="learner steps per run")
    parser.add_argument("--skip", type=int, default=3, help="warm-up steps left out")
    parser.add_argument("--staleness", type=int, default=4, help="async max_staleness")
    parser.add_argument("--time-scale", type=float, default=1 / 40, help="sleep / model time")
    parser.add_argument(
        "--weight-update",
        choices=["keep", "drain"],
        default="keep",
        help="how weight syncs treat generations in flight (rollout.weight_update)",
    )
    args = parser.parse_args()
    import ray

    model = replace(SimModel(), time_scale=args.time_scale)
    counts = [int(w) for w in args.workers.split(",")]
    agenthub.register("cluster-sim", "agenthub.trainer._sim:SimTasks", override=True)
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        num_cpus=max(counts) + 2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    learner_cap = model.learner_capacity(BATCH_GROUPS * SAMPLES)
    print(
        f"model: {CONCURRENCY} x {model.decode_tokens_per_s:g} tok/s per engine, "
        f"{model.turns} turns x {model.reply_tokens} tokens, env lognormal mean "
        f"{model.env_mean_s:g} s sigma {model.env_sigma:g}, learner "
        f"{model.learner_s_per_token * 1e6:g} us/token, sync {model.param_bytes:.3g} B x "
        f"{model.sync_s_per_byte * 1e9:g} ns/B, updates {args.weight_update} (KV "
        f"recomputed at {model.prefill_tokens_per_s:g} tok/s), time scale {model.time_scale:g}"
    )
    print(
        f"capacity: {model.rollout_capacity(1, CONCURRENCY):.2f} trajectories/s per worker, "
        f"learner {learner_cap:.2f}/s"
    )
    print(
        f"workers  rollout/learner  mode (max_staleness 0/{args.staleness})  learner idle  "
        "(start  finish  batch  other)  queued  traj/s  ideal  efficiency  stale groups  cores  "
        "async/sync  | orchestration at real time: idle  efficiency  async/sync"
    )
    balanced: tuple[Point, Point] | None = None
    with tempfile.TemporaryDirectory() as scratch:
        model_path = Path(scratch) / "sim-model.json"
        model.save(model_path)
        for workers in counts:
            ratio = model.rollout_capacity(workers, CONCURRENCY) / learner_cap
            points: dict[str, Point] = {}
            for staleness, mode in ((0, "sync"), (args.staleness, "async")):
                p = run_point(
                    model, model_path, workers, staleness, args.steps, args.skip, args.weight_update
                )
                points[mode] = p
                print(_row(p, ratio, mode, points.get("sync") if mode == "async" else None))
            if abs(ratio - 1) < 0.2:
                balanced = (points["sync"], points["async"])
    ray.shutdown()
    if balanced is not None:
        sync, a = balanced
        idle, per_s = a.at_real_time()
        print(
            f"balanced point: async/sync {a.per_s / sync.per_s:.2f}x measured, "
            f"{per_s / sync.at_real_time()[1]:.2f}x with the orchestration at real time; "
            f"efficiency measured {a.per_s / a.ideal:.2f}, with the orchestration at real "
            f"time (learner idle {idle:.1%}): {per_s / a.ideal:.2f}"
        )


def _row(p: Point, ratio: float, mode: str, sync: Point | None) -> str:
    idle, per_s = p.at_real_time()
    speed = real_speed = ""
    if sync is not None:
        speed = f"{p.per_s / sync.per_s:.2f}x"
        real_speed = f"{per_s / sync.at_real_time()[1]:.2f}x"
    return (
        f"{p.workers:7d}  {ratio:15.2f}  {mode:27s}  {p.idle:12.1%}  "
        f"({p.start:5.1%}  {p.finish:6.1%}  {p.batch_wait:5.1%}  {p.other:5.1%})  "
        f"{p.queued:6.0%}  {p.per_s:6.2f}  {p.ideal:5.2f}  {p.per_s / p.ideal:10.2f}  "
        f"{p.stale:12.1%}  {p.cpu_cores:5.2f}  {speed:10s}  |  "
        f"{idle:5.1%}  {per_s / p.ideal:10.2f}  {real_speed}"
    )


if __name__ == "__main__":
    main()
