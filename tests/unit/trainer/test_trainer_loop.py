"""The Trainer's loop end to end on an in-memory cluster: what a run writes, how it stops, and
how a resumed run goes on. The same loop on Ray, vLLM and DeepSpeed runs in
tests/integration/trainer/test_train_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub import AgentHubError
from agenthub.trainer import RunDirectory, StepReport, Trainer
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._metrics import read_metrics

from ._fakes import FakeCluster, trajectory

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

    def __call__(self, cfg: TrainConfig, version: int, drawn: list[int]) -> FakeCluster:
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
    # Two good steps, then every episode fails.
    def groups(version: int) -> list[list[object]]:
        return [[trajectory(1.0, version, error=version >= 2), trajectory(0.0, version)]]

    trainer, _, _, _ = _train(tmp_path, "run.max_steps=9", "run.max_failed_groups=4", groups=groups)
    with pytest.raises(AgentHubError, match="the last 4 groups of episodes all ended in errors"):
        trainer.run()
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 2
    assert trainer.control.reason is not None and trainer.control.reason.kind == "failed_groups"
