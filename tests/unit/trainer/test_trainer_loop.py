"""The Trainer's loop end to end on an in-memory cluster: what a run writes, how it stops, and
how a resumed run goes on. The same loop on Ray, vLLM and DeepSpeed runs in
tests/integration/trainer/test_train_cli.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub import AgentHubError
from agenthub.trainer import RunDirectory, StepReport, Trainer
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._control import FaultCounts
from agenthub.trainer._metrics import read_metrics

from ._fakes import FakeCluster, Kills, ProcessDied, SlowLearner, trajectory

if TYPE_CHECKING:
    from agenthub.agents import Trajectory

SMALL = [
    "env=math",
    "algorithm.batch_groups=2",
    "eval.every=2",
    "run.checkpoint_every=2",
    "run.wandb=disabled",
    "run.save_trajectories=1",
]


class _Clusters:
    """The factory a Trainer makes its cluster with; keeps the one it made."""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.made: list[FakeCluster] = []
        self.started_at: list[int] = []
        """The policy version each cluster was made at."""

    def __call__(self, cfg: TrainConfig, version: int, drawn: list[int]) -> FakeCluster:
        self.started_at.append(version)
        self.made.append(FakeCluster(cfg, version, drawn, **self.options))  # type: ignore[arg-type]
        return self.made[-1]


def _train(out: Path, *overrides: str, resume: bool = False, **options: object) -> tuple:  # type: ignore[type-arg]
    said: list[str] = []
    reports: list[StepReport] = []
    clusters = _Clusters(**options)
    trainer = Trainer(
        load_config([], [*SMALL, *overrides]),
        out,
        resume=resume,
        on_step=reports.append,
        log=said.append,
        cluster=clusters,
    )
    return trainer, clusters, said, reports


def _trained(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl") if "train/reward" in r]


def _evaluated(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl") if "eval/errors" in r]


def test_a_run_trains_checkpoints_evaluates_and_says_why_it_stopped(tmp_path: Path) -> None:
    trainer, clusters, said, reports = _train(tmp_path, "run.max_steps=3")
    summary = trainer.run()
    assert summary.stopped.kind == "max_steps" and str(summary.stopped) == "reached max_steps=3"
    assert summary.steps == 3 and not summary.interrupted
    assert summary.to_json()["stopped"] == "reached max_steps=3"
    assert [r.step for r in reports] == [1, 2, 3]
    assert _trained(tmp_path) == [1, 2, 3]
    assert _evaluated(tmp_path) == [0, 2, 3], "the start, every 2 steps, and the end"
    state = RunDirectory(tmp_path).state()
    assert state is not None and (state.step, state.tag) == (3, "step-3")
    assert state.history == ["step-2", "step-3"] and state.bf16 is False
    assert RunDirectory(tmp_path).exported_step() == 3
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 3
    assert said[0] == "starting 1 rollout worker(s) and the learner"
    assert said[1] == "evaluating the starting policy on held-out tasks"
    record = read_metrics(tmp_path / "metrics.jsonl")[1]
    assert record["groups/trained"] == 2 and record["learner/loss"] == 0.5
    assert list(record)[-2:] == ["time_s", "tokens_per_s"]
    cluster = clusters.made[0]
    assert cluster.calls == ["start", "run_workers", "stop_workers"] and cluster.closed


def test_a_resumed_run_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    first, _, _, _ = _train(tmp_path, "run.max_steps=3", eval_rewards=[0.25])
    assert first.run().first_eval_reward == 0.25
    trainer, clusters, said, _ = _train(tmp_path, "run.max_steps=5", resume=True)
    summary = trainer.run()
    assert "resumed from step-3 (policy version 3)" in said
    assert clusters.made[0].learner_steps == 5 and summary.steps == 5
    assert _trained(tmp_path) == [1, 2, 3, 4, 5]
    assert summary.first_eval_reward == 0.25, "the run's first evaluation, from its first session"
    assert json.loads((tmp_path / "config.json").read_text())["run"]["max_steps"] == 5


def test_a_stopped_run_saves_its_step_and_skips_the_closing_evaluation(tmp_path: Path) -> None:
    trainers: list[Trainer] = []

    def stop_at_step_3(steps: int) -> None:
        if steps == 3:
            trainers[0].stop()

    trainer, _, _, _ = _train(tmp_path, "run.max_steps=9", on_learn=stop_at_step_3)
    trainers.append(trainer)
    summary = trainer.run()
    assert summary.steps == 3 and summary.stopped.kind == "stopped"
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 3
    assert _evaluated(tmp_path) == [0, 2], "no closing evaluation once stopped"


def test_failed_groups_stop_the_run_with_their_error_once_checkpointed(tmp_path: Path) -> None:
    # Good groups until the policy reaches version 2, then every episode fails.
    def groups(version: int) -> list[list[object]]:
        return [[trajectory(1.0, version, error=version >= 2), trajectory(0.0, version)]]

    trainer, _, _, _ = _train(tmp_path, "run.max_steps=9", "run.max_failed_groups=4", groups=groups)
    with pytest.raises(AgentHubError, match="the last 4 groups of episodes all ended in errors"):
        trainer.run()
    # Steps whose batches came before are trained (step 3's was assembled while step 2
    # trained), and the last of them is checkpointed before the run stops.
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == _trained(tmp_path)[-1] == 3
    assert trainer.control.reason is not None and trainer.control.reason.kind == "failed_groups"


def test_a_run_resumed_at_step_0_without_evaluations_evaluates_the_starting_policy(
    tmp_path: Path,
) -> None:
    """A run that stopped before its first step without evaluations (every episode failed,
    `eval.every=0`) left a checkpoint of step 0; resumed with evaluations, it evaluates the
    starting policy first. (A run resumed after a later step does not:
    `test_a_resumed_run_goes_on_from_its_checkpoint`.)"""

    def failing(version: int) -> list[list[object]]:
        return [[trajectory(1.0, version, error=True), trajectory(0.0, version, error=True)]]

    broken, _, _, _ = _train(
        tmp_path, "run.max_steps=3", "eval.every=0", "run.max_failed_groups=2", groups=failing
    )
    with pytest.raises(AgentHubError, match="all ended in errors"):
        broken.run()
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 0 and _evaluated(tmp_path) == []

    stopped: list[Trainer] = []
    fixed, _, said, _ = _train(
        tmp_path,
        "run.max_steps=3",
        "eval.every=2",
        resume=True,
        on_learn=lambda _: stopped[0].stop(),
    )
    stopped.append(fixed)
    fixed.run()
    assert "evaluating the starting policy on held-out tasks" in said
    assert _evaluated(tmp_path) == [0]


class _SlowLearner(SlowLearner):
    """Counts the groups the driver takes off the queue while the learner trains."""

    taken_while_learning = 0

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        got = await super().take_groups(most, timeout_s)
        self.taken_while_learning += len(got) if self.learning else 0
        return got


def test_the_next_batch_is_assembled_while_the_learner_trains(tmp_path: Path) -> None:
    made: list[_SlowLearner] = []

    def cluster(cfg: TrainConfig, version: int, drawn: list[int]) -> _SlowLearner:
        made.append(_SlowLearner(cfg, version, drawn))
        return made[-1]

    cfg = load_config([], [*SMALL, "run.max_steps=3"])
    summary = Trainer(cfg, tmp_path, log=lambda _: None, cluster=cluster).run()
    assert summary.steps == 3 and _trained(tmp_path) == [1, 2, 3]
    assert made[0].taken_while_learning == 4, "steps 2 and 3's two groups each, none beyond"
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "train/reward" in r]
    assert [r["groups/stale"] for r in records] == [0, 0, 0], "judged against their own step"


def test_a_dead_rollout_worker_is_replaced_and_the_run_goes_on(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(tmp_path, "run.max_steps=4", kills=Kills(worker_at=[2]))
    summary = trainer.run()
    assert summary.steps == 4 and summary.stopped.kind == "max_steps"
    assert _trained(tmp_path) == [1, 2, 3, 4], "no step lost or taken twice"
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 4
    cluster = clusters.made[0]
    assert len(clusters.made) == 1, "the same session goes on"
    assert [(ranks, version) for ranks, version, _ in cluster.replaced] == [([0], 3)]
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    faults = {"seen": 1, "survived": 1, "episodes_lost": 2, "episodes_kept": 0}
    assert summary.to_json()["faults"] == faults
    assert any(line.startswith("rollout worker 0 died (ProcessDied: killed)") for line in said)
    assert (
        "rollout worker 0 replaced, its engine at policy version 3; 2 episode(s) in flight "
        "lost, the run goes on" in said
    )


def test_rollout_workers_dying_past_their_budget_stop_the_run(tmp_path: Path) -> None:
    trainer, _, said, _ = _train(
        tmp_path, "run.max_steps=9", "run.max_worker_restarts=1", kills=Kills(worker_at=[1, 3])
    )
    with pytest.raises(ProcessDied, match="rollout worker 0 died"):
        trainer.run()
    assert _trained(tmp_path) == [1, 2, 3]
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 3, "checkpointed after the failure"
    assert trainer.faults.counts == FaultCounts(seen=2, survived=1, episodes_lost=2)
    assert any("run.max_worker_restarts=1): stopping the run" in line for line in said)


def test_the_worker_budget_is_per_hour(tmp_path: Path) -> None:
    trainer, _, _, _ = _train(tmp_path, "run.max_worker_restarts=1")
    faults, now = trainer.faults, [0.0]
    faults.clock = lambda: now[0]
    assert faults.worker_lost(0, ProcessDied("killed"))
    now[0] = 3599.0
    assert not faults.worker_lost(0, ProcessDied("killed")), "a second within the hour"
    now[0] = 3601.0
    assert faults.worker_lost(0, ProcessDied("killed")), "the first is an hour old"


def test_a_dead_learner_restarts_from_the_last_checkpoint(tmp_path: Path) -> None:
    # Checkpoints at steps 2 and 4; the learner dies during step 5.
    trainer, clusters, said, _ = _train(tmp_path, "run.max_steps=6", kills=Kills(learner_at=[5]))
    summary = trainer.run()
    assert summary.steps == 6 and summary.stopped.kind == "max_steps"
    assert _trained(tmp_path) == [1, 2, 3, 4, 5, 6], "metrics cut back, no step twice"
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 6
    assert clusters.started_at == [0, 4], "a new session from the checkpoint"
    assert clusters.made[0].closed, "the dead learner's session is closed"
    assert clusters.made[1].learner_steps == 6
    # The groups the driver held when the learner died (the batch it died on) go on with it.
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=4, episodes_kept=4)
    assert (
        "the learner died (ProcessDied: the learner died); restarting it from the last "
        "checkpoint" in said
    )
    assert (
        "the learner restarts from step-4 (policy version 4); 0 step(s) are taken again; 4 "
        "episode(s) in flight lost, the run goes on" in said
    )
    assert "resumed from step-4 (policy version 4)" in said


def test_a_learner_dead_before_any_checkpoint_restarts_from_step_0(tmp_path: Path) -> None:
    trainer, _, said, _ = _train(tmp_path, "run.max_steps=3", kills=Kills(learner_at=[2]))
    summary = trainer.run()
    assert summary.steps == 3 and _trained(tmp_path) == [1, 2, 3]
    assert _evaluated(tmp_path) == [0, 2, 3], "the logs started again with the run"
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 3
    assert any(
        "the learner restarts from the initial weights (step 0): the run had no checkpoint yet; "
        "1 step(s) are taken again" in line
        for line in said
    )


def test_learner_restarts_past_their_budget_stop_the_run(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(
        tmp_path, "run.max_steps=9", "run.max_learner_restarts=1", kills=Kills(learner_at=[3, 3])
    )
    with pytest.raises(ProcessDied, match="the learner died"):
        trainer.run()
    assert len(clusters.made) == 2 and all(c.closed for c in clusters.made)
    assert _trained(tmp_path) == [1, 2]
    assert trainer.faults.counts == FaultCounts(
        seen=2, survived=1, episodes_lost=4, episodes_kept=4
    )
    assert any("run.max_learner_restarts=1): stopping the run" in line for line in said)


async def _admission_after_a_death() -> tuple[tuple[int, int | None], dict[str, int], int]:
    from agenthub.trainer._workers import Admission

    gate = Admission(batch_groups=2, max_staleness=1)
    for drawn in (1, 2, 3):  # worker 0 admits three groups, queues one, then dies
        await gate.acquire(0, drawn)
    gate.landed(0)
    forgotten = await gate.forget(0)
    await gate.acquire(0, 7, life=0)  # a call the dead worker left pending: no room taken
    await gate.acquire(0, 4, life=1)  # its replacement's first group
    return forgotten, gate.stats(), gate.groups_in_flight()


def test_a_dead_workers_groups_in_flight_give_their_places_back() -> None:

    forgotten, stats, in_flight = asyncio.run(_admission_after_a_death())
    assert forgotten == (2, 3), "two groups lost; the replacement goes on after task 3"
    assert stats == {"started": 4, "discarded": 2, "version": 0}
    assert in_flight == 1
