"""The training loop: rollout workers and the learner on Ray, joined by a bounded queue.

Rollout workers play episodes continuously and push finished groups into the queue, admitted
no further ahead of the learner than `max_staleness` policy versions. The driver (this module)
takes groups off the queue, drops the stale, failed and signal-free ones, computes advantages,
hands the batch to the learner actor, and sends the new weights to every engine under the next
policy version while the learner goes on. With `max_staleness = 0` the same loop is
synchronous: rollouts wait for each step's weights.

The parts each own their state: the run directory (`_rundir`), the cluster of Ray actors
(`_cluster`), batch assembly (`_assembly`; the next batch, under way while the learner trains:
`_next_batch`), weight publishing (`_publisher`), held-out evaluation (`_evaluation`),
checkpoints (`_checkpoint`), the stop (`_control`) and the learner steps (`_steps`). The
`Trainer` here only wires them together and brings the run back from a lost process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agenthub._errors import AgentHubError
from agenthub._tracebacks import described
from agenthub.agents import Trajectory
from agenthub.trainer._assembly import BatchAssembler
from agenthub.trainer._checkpoint import Checkpointer
from agenthub.trainer._cluster import Cluster, RayCluster, start_ray
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._control import Faults, RunControl, RunSummary, StopReason, interruptible
from agenthub.trainer._evaluation import HeldOutEvaluator, HeldOutRewards
from agenthub.trainer._library_logs import library_log
from agenthub.trainer._metrics import (
    MetricsLog,
    StepRecord,
    StepReport,
    read_metrics,
)
from agenthub.trainer._preflight import check_engine_gpus, check_env, ray_node_gpus
from agenthub.trainer._publisher import WeightPublisher
from agenthub.trainer._recovery import LearnerLost, Recovery
from agenthub.trainer._rundir import CheckpointState, RunDirectory, disk_full
from agenthub.trainer._steps import Clock, Parts, Progress, Steps

if TYPE_CHECKING:
    from agenthub.agents.default_model import BuildProgress

__all__ = ["ClusterFactory", "RunSummary", "StepReport", "Trainer"]

SALVAGE_S = 60.0
"""How long reading the queue may take after the learner died."""

Group = list[Trajectory]

ClusterFactory = Callable[[TrainConfig, int, list[int]], Cluster]
"""Makes the run's cluster for a config, the policy version it starts at, and the training
tasks each rollout worker has drawn."""


@dataclass(frozen=True)
class _Start:
    """Where a run starts: its step, each worker's place in the tasks, and its time so far."""

    step: int
    tasks_drawn: list[int]
    elapsed_s: float

    @classmethod
    def of(cls, state: CheckpointState | None, cfg: TrainConfig) -> _Start:
        if state is None:
            return cls(0, [0] * cfg.ray.rollout_workers, 0.0)
        if len(state.tasks_drawn) != cfg.ray.rollout_workers:
            raise AgentHubError(
                f"the checkpoint has {len(state.tasks_drawn)} rollout workers' task positions "
                f"but the config asks for {cfg.ray.rollout_workers}; resume with "
                f"ray.rollout_workers={len(state.tasks_drawn)}"
            )
        return cls(state.step, list(state.tasks_drawn), state.elapsed_s)


class Trainer:
    """One training run. `run()` trains until `max_steps`, `max_minutes` or `stop()`, saving a
    checkpoint whenever it stops; a later `Trainer` on the same directory with `resume=True`
    continues from that checkpoint with the learner's optimizer state, the policy version and
    the position in each worker's task stream. `cluster` replaces the Ray cluster (and the
    model it loads) with another (an in-memory one in tests)."""

    def __init__(
        self,
        config: TrainConfig,
        out: Path,
        *,
        resume: bool = False,
        on_step: Callable[[StepReport], None] | None = None,
        log: Callable[[str], None] = print,
        build_progress: BuildProgress | None = None,
        cluster: ClusterFactory | None = None,
    ) -> None:
        self.config = config
        self.dir = RunDirectory(out)
        self.resume = resume
        self.on_step = on_step
        self.log = log
        self.build_progress = build_progress  # shows the default model's first build
        self.control = RunControl()
        self.held_out = HeldOutRewards()
        run = config.run
        self.faults = Faults(run.max_worker_restarts, run.max_learner_restarts, log)
        self.recovery = Recovery(self.faults, config, self.dir.how_to_go_on)
        self._make_cluster = cluster
        self._set_up = False  # the run directory holds this run (--resume can find it)

    def stop(self, reason: str = "stopped") -> None:
        """Ask the run to stop after the step in progress (safe from a signal handler)."""
        self.control.stop(StopReason("stopped", reason))

    def run(self) -> RunSummary:
        """Train; returns the run's summary. Ray, when this run started it, is shut down
        before returning, so no late worker output follows."""
        import ray

        owns_ray = not ray.is_initialized()
        try:
            with self.dir.locked():
                return asyncio.run(self._main())
        except KeyboardInterrupt:
            if self._set_up:  # Ctrl-C twice: what was trained since the last checkpoint is gone
                self.log(f"quit without saving. {self.dir.how_to_go_on()}")
            raise
        except ray.exceptions.RayActorError as exc:
            # A process of the run died (the OOM killer, a crash in native code): Ray's message
            # says which and why; the driver's traceback adds nothing.
            raise AgentHubError(f"{exc}\n{self.dir.how_to_go_on()}") from exc
        except Exception as exc:
            # Errors raised on purpose in the driver say what to do; any other, once the run
            # directory is set up, is told where the run can go on from.
            if self._set_up and (
                not isinstance(exc, AgentHubError) or isinstance(exc, ray.exceptions.RayError)
            ):
                self.log(f"the run failed: {type(exc).__name__}. {self.dir.how_to_go_on()}")
            full = None if isinstance(exc, AgentHubError) else disk_full(self.dir.path)
            if full is not None:  # writers fail in their own words (torch: "unexpected pos")
                raise AgentHubError(f"{full}; {described(exc)}") from exc
            raise
        finally:
            if owns_ray and ray.is_initialized():
                ray.shutdown()

    async def _main(self) -> RunSummary:
        cfg = self.config
        check_engine_gpus(cfg)
        await check_env(cfg)
        state = self.dir.prepare(cfg, resume=self.resume, log=self.log)
        if state is not None:  # its evaluations so far, for the summary
            self.held_out.replay(read_metrics(self.dir.metrics))
        self._set_up = True
        make_cluster = self._make_cluster or self._ray_cluster()
        with interruptible(asyncio.get_running_loop(), self.control, self.log):
            restarted = False
            carried = self._kept(self.dir.groups(state) if state else [], "the checkpoint")
            while True:
                try:
                    return await self._open_session(make_cluster, state, restarted, carried)
                except LearnerLost as lost:
                    state, restarted = self._restart_point(lost), True
                    kept = [*(self.dir.groups(state) if state else []), *lost.groups]
                    carried = self._kept(_once(kept), "before the learner died")

    def _kept(self, groups: list[Group], where: str) -> list[Group]:
        self.faults.kept(sum(len(g) for g in groups), where)
        return groups

    async def _open_session(
        self,
        make_cluster: ClusterFactory,
        state: CheckpointState | None,
        restarted: bool,
        carried: list[Group],
    ) -> RunSummary:
        """One session: a cluster from `state` (None: step 0), and its metrics log; the
        finished groups `carried` into it are trained first, or judged stale."""
        cfg = self.config
        start = _Start.of(state, cfg)
        cluster = make_cluster(cfg, start.step, start.tasks_drawn)
        self.recovery.new_session()
        try:
            metrics = MetricsLog(
                self.dir.path,
                title=f"agenthub train --env {cfg.env}",
                wandb=cfg.run.wandb,
                config=cfg.model_dump(mode="json"),
                resume=self.resume or restarted,
            )
            try:
                parts = self._parts(cluster, metrics)
                held = parts.assembler.carry(carried, start.step)
                return await self._session(parts, state, start, held)
            finally:
                metrics.close()
        finally:
            await cluster.aclose()

    def _restart_point(self, lost: LearnerLost) -> CheckpointState | None:
        """After the learner died: the run directory cut back to its last checkpoint, as
        `--resume` does, and that checkpoint's state (None: from step 0)."""
        state = self.dir.prepare(self.config, resume=True, log=self.log)
        self.held_out = HeldOutRewards()
        if state is not None:
            self.held_out.replay(read_metrics(self.dir.metrics))
            where = f"{state.tag} (policy version {state.step})"
        else:
            where = "the initial weights (step 0): the run had no checkpoint yet"
        redone = lost.step - (state.step if state else 0)
        self.faults.survived(
            lost.episodes, f"the learner restarts from {where}; {redone} step(s) are taken again"
        )
        return state

    def _ray_cluster(self) -> ClusterFactory:
        """Resolve the model (building the default one, the first time) and start Ray."""
        from agenthub.agents._engines import resolve_model

        model_path = resolve_model(self.config.model, needed=True, progress=self.build_progress)
        assert model_path is not None
        start_ray(self.config, library_log(self.dir.path))
        check_engine_gpus(self.config, ray_node_gpus())
        processes = self.dir.processes
        return lambda cfg, version, drawn: RayCluster(
            cfg, model_path, version, drawn, processes=processes
        )

    def _parts(self, cluster: Cluster, metrics: MetricsLog) -> Parts:
        cfg, log = self.config, self.log
        publisher = WeightPublisher(cluster)

        def on_idle() -> None:  # no group came: a dead worker, or a failed sync, says why
            cluster.check_workers()
            publisher.check()

        assembler = BatchAssembler(
            cfg, cluster, self.control, out=self.dir.path, log=log, on_idle=on_idle
        )
        return Parts(
            cluster=cluster,
            metrics=metrics,
            assembler=assembler,
            publisher=publisher,
            evaluator=HeldOutEvaluator(cfg.eval, cluster, metrics, self.held_out, log),
            checkpointer=Checkpointer(cfg, self.dir, cluster, log, assembler.untrained),
        )

    async def _session(
        self, parts: Parts, state: CheckpointState | None, start: _Start, held: int
    ) -> RunSummary:
        """Start the cluster, restore the checkpoint, evaluate the starting policy (unless a
        session before did: a run that stopped at step 0 with `eval.every=0`, resumed with
        evaluations, has none yet), and train; a run stopped during start-up returns at once
        (nothing learned to save). The `held` groups carried into it hold their places in the
        admission gate before rollouts start."""
        cluster, cfg = parts.cluster, self.config
        self.log(f"starting {cfg.ray.rollout_workers} rollout worker(s) and the learner")
        if not await self.control.unless_stopped(cluster.start()):
            return self._summary(start.step, start.elapsed_s)
        self.recovery.started(cluster)  # workers not placed in time: the run goes on without
        parts.checkpointer.bf16 = await cluster.open_weight_sync()
        if state is not None:
            await parts.checkpointer.restore(state)
            await parts.publisher.publish_now(state.step)
            self.log(f"resumed from {state.tag} (policy version {state.step})")
        if cfg.eval.every and start.step == 0 and not self.held_out.count:
            self.log("evaluating the starting policy on held-out tasks")
            if not await self.control.unless_stopped(parts.evaluator.evaluate(0)):
                return self._summary(start.step, start.elapsed_s)
        await cluster.hold_places(held)
        cluster.run_workers()
        return await self._loop(parts, start.step, Clock(start.elapsed_s, cfg.run.max_minutes))

    async def _loop(self, parts: Parts, step: int, clock: Clock) -> RunSummary:
        """Train until `max_steps` or a stop, replacing rollout workers that die on the way
        (a learner that dies ends the session: `LearnerLost`). The next step's batch, under
        way while the learner trains, outlives a recovery: paused, never cut short, it goes
        on once the run does, and is cancelled only when the session ends. A learner step
        asked for is counted before a recovery, which sends the learner's weights again."""
        p, at = parts, Progress(step, logged=step)
        steps = Steps(
            self.config, p, at, clock, control=self.control, rundir=self.dir, report=self._report
        )
        try:
            while True:
                try:
                    await steps.run()
                    break
                except Exception as exc:
                    await steps.settle()
                    try:
                        outcome = await self.recovery.recover(p.cluster, p.publisher, exc, at.step)
                    except LearnerLost as lost:
                        lost.groups = await _salvaged(p)
                        raise
                    if outcome == "go_on":
                        continue
                    # A rollout worker failed: the learner's steps since the last checkpoint
                    # need not be lost with it, if it holds the state of a logged step.
                    if outcome != "learner_dead" and not at.learning and at.logged == at.step:
                        await p.checkpointer.save_after_failure(
                            at.step, clock.elapsed(), p.publisher.pending
                        )
                    p.publisher.forget_failure()
                    if (stop := self.recovery.stop_error()) is not None:  # once saved
                        raise stop from exc
                    raise
        finally:
            await steps.close()
        return await self._finish(p, at.step, clock)

    def _report(self, record: StepRecord) -> None:
        if self.on_step is not None:
            self.on_step(record.report(self.config.run.max_steps, self.held_out.last))

    async def _finish(self, p: Parts, step: int, clock: Clock) -> RunSummary:
        """Checkpoint where the loop ended, evaluate the last policy (unless stopping), and
        raise a failure that stopped the run once it is saved."""
        cfg = self.config
        await p.publisher.wait(admitted=True)
        self.control.finish(StopReason("max_steps", f"reached max_steps={cfg.run.max_steps}"))
        elapsed = clock.elapsed()
        await p.checkpointer.save_unless_saved(step, elapsed)
        p.cluster.stop_workers()
        await p.evaluator.settle(cancel=self.control.stopping)  # stopping: not waited for
        if cfg.eval.every and step > 0 and not self.control.stopping:
            await p.evaluator.evaluate(step)
        p.metrics.plot()
        if self.control.failure is not None:
            raise self.control.failure
        return self._summary(step, elapsed)

    def _summary(self, step: int, elapsed_s: float) -> RunSummary:
        reason = self.control.reason or StopReason("stopped", "stopped")
        h, workers = self.held_out, self.recovery.workers
        return RunSummary(step, reason, elapsed_s, h.last, h.first, workers, self.faults.counts)


async def _salvaged(p: Parts) -> list[Group]:
    """The learner died: the finished groups the driver still has, for the restarted one.
    Those handed to the learner since the last checkpoint (the restart takes their steps
    again), then those not yet handed (the queue lives on the driver's node)."""
    try:
        waiting = await asyncio.wait_for(p.assembler.untrained(), SALVAGE_S)
    except TimeoutError:
        waiting = []
    return [*p.checkpointer.since, *waiting]


def _once(groups: list[Group]) -> list[Group]:
    """`groups` without repeats, in order (the checkpoint's groups were handed on since)."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for group in groups:
        key = tuple(t.model_dump_json() for t in group)
        if key not in seen:
            seen.add(key)
            kept.append(group)
    return kept
