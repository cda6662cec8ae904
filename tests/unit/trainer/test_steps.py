"""The learner's next step asked for behind the weight sync: the learner goes from one to the
other without waiting for the driver, and what it saves and sends stays each step's own."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer import Trainer
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._metrics import read_metrics
from tests._loop import settle

from ._fakes import FakeCluster, ProcessDied
from .test_trainer_loop import SMALL

T = TypeVar("T")


class _InOrderLearner(FakeCluster):
    """A learner that runs the calls made of it one at a time, in the order they were made,
    each over a few turns of the event loop, as a Ray actor does; `log` says when each was
    asked for, began and ended. `fail_sync` makes the sync of that version fail as one into
    an engine that died: rollout worker 0 is then dead."""

    def __init__(self, *args: Any, fail_sync: int | None = None, **options: Any) -> None:
        super().__init__(*args, **options)
        self.turn = asyncio.Lock()  # waiters acquire it in the order they came
        self.log: list[str] = []
        self.fail_sync = fail_sync

    async def _in_turn(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        self.log.append(f"{what} asked")
        async with self.turn:
            self.log.append(f"{what} began")
            await settle(10)
            try:
                return await call()
            finally:
                self.log.append(f"{what} ended")

    async def learn(self, batch: Any) -> dict[str, float]:
        return await self._in_turn("learn", lambda: super(_InOrderLearner, self).learn(batch))

    async def send_weights(self, version: int) -> float:
        async def send() -> float:
            if version == self.fail_sync:
                self.dead_workers.add(0)
                raise ProcessDied("the engine of rollout worker 0 died during the sync")
            return await FakeCluster.send_weights(self, version)

        return await self._in_turn(f"send {version}", send)

    async def save_checkpoint(self, directory: Path, tag: str) -> None:
        saved = super().save_checkpoint
        await self._in_turn(f"save {tag}", lambda: saved(directory, tag))


def _run(tmp_path: Path, *overrides: str, **options: Any) -> list[_InOrderLearner]:
    made: list[_InOrderLearner] = []

    def cluster(cfg: TrainConfig, version: int, drawn: list[int]) -> _InOrderLearner:
        made.append(_InOrderLearner(cfg, version, drawn, **options))
        return made[-1]

    cfg = load_config([], [*SMALL, "eval.every=0", *overrides])
    Trainer(cfg, tmp_path, log=lambda _: None, cluster=cluster).run()
    return made


def _trained(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl") if "train/reward" in r]


def _began(log: list[str]) -> list[str]:
    return [line.removesuffix(" began") for line in log if line.endswith(" began")]


def test_the_next_step_is_asked_for_behind_the_sync_when_its_batch_is_ready(
    tmp_path: Path,
) -> None:
    learner = _run(tmp_path, "run.max_steps=5")[0]
    assert _trained(tmp_path) == [1, 2, 3, 4, 5]
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "train/reward" in r]
    assert [r["learner/queued"] for r in records] == [0, 1, 0, 1, 0]  # not after checkpoints
    for r in records:  # a queued step's time counts its wait for the batch
        assert 0.0 <= r["learner/wait_s"] <= r["learner/step_s"]
        assert 0.0 <= r["learner/learn_s"] <= r["learner/step_s"]
    log = learner.log
    # After step 1 (no checkpoint due) step 2 is asked for before the sync of version 1 ends.
    assert log.index("learn asked", log.index("send 1 asked")) < log.index("send 1 ended")
    # The learner computed and sent in turn: each version's weights are that step's.
    began = [call for call in _began(log) if not call.startswith("save")]
    assert began == [
        "learn", "send 1", "learn", "send 2", "learn", "send 3", "learn", "send 4",
        "learn", "send 5",
    ]  # fmt: skip


def test_a_step_with_a_checkpoint_due_is_saved_before_the_next_step_is_asked_for(
    tmp_path: Path,
) -> None:
    learner = _run(tmp_path, "run.max_steps=4")[0]
    log = learner.log
    assert log.index("save step-2 asked") < log.index("learn asked", log.index("send 2 asked"))
    saved = sorted((tmp_path / "checkpoints").glob("*/steps"))
    assert len(saved) == 2
    for steps in saved:
        step = int(re.sub(r"\D", "", steps.parent.name))
        assert steps.read_text() == str(step), "a checkpoint holds its own step's learner"


def test_a_failed_sync_with_a_step_behind_it_logs_that_step_then_recovers(
    tmp_path: Path,
) -> None:
    learner = _run(tmp_path, "run.max_steps=4", fail_sync=1)[0]
    assert _trained(tmp_path) == [1, 2, 3, 4], "no step lost or taken twice"
    # Step 2 ran behind the failed sync: logged, and its weights sent as version 2 by the
    # worker's replacement (never as version 1).
    assert [(ranks, version) for ranks, version, _ in learner.replaced] == [([0], 2)]
    assert learner.log.index("learn asked", learner.log.index("send 1 asked")) < (
        learner.log.index("send 1 ended")
    )
