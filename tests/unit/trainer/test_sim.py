"""The cluster simulation's model and its engine's weight-update gate, without Ray."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer._config import load_config
from agenthub.trainer._sim import SimModel, SimRolloutWorker


def test_the_model_states_its_capacities() -> None:
    model = SimModel()
    assert model.episode_s == 4 * (256 / 64 + 2.0)
    assert model.trajectory_tokens == 512 + 4 * 256 + 3 * 64
    assert model.rollout_capacity(4, 32) == pytest.approx(4 * 32 / 24)
    step_s = 64 * model.trajectory_tokens * 96e-6 + 1.4
    assert model.learner_capacity(64) == pytest.approx(64 / step_s)


class _Queue:
    def __init__(self) -> None:
        self.groups: list[object] = []

    async def put_batch(self, groups: list[object]) -> None:
        self.groups += groups


class _Admission:
    class acquire:  # a Ray actor method's shape: `.acquire.remote()`
        @staticmethod
        async def remote() -> int:
            return 0


def _worker(tmp_path: Path, weight_update: str) -> tuple[SimRolloutWorker, _Queue]:
    SimModel(time_scale=1 / 100).save(tmp_path / "model.json")
    cfg = load_config(
        [],
        [
            "env=math",
            "rollout.concurrency=4",
            "rollout.n_samples_per_prompt=2",
            f"rollout.weight_update={weight_update}",
        ],
    )
    queue = _Queue()
    worker = SimRolloutWorker(
        cfg.model_dump(mode="json"), str(tmp_path / "model.json"), 0, queue, _Admission()
    )
    return worker, queue


def _versions(queue: _Queue) -> set[int]:
    return {v for group in queue.groups for t in group for v in t.policy_versions}  # type: ignore[attr-defined]


def test_a_draining_weight_update_waits_for_generations_in_flight_and_holds_new_ones(
    tmp_path: Path,
) -> None:
    worker, queue = _worker(tmp_path, "drain")

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.01)
        assert worker.engine._in_flight > 0
        await worker.start_weight_update(1)
        assert worker.engine._in_flight == 0, "the round waited for the generations"
        await asyncio.sleep(0.06)  # longer than a generation: none may start meanwhile
        assert worker.engine._in_flight == 0
        await worker.finish_weight_update()
        await asyncio.sleep(0.5)
        running.cancel()

    asyncio.run(scenario())
    assert worker.stats().policy_version == 1
    assert _versions(queue) == {0, 1}


def test_a_keeping_weight_update_pauses_generations_in_flight_and_they_go_on_after(
    tmp_path: Path,
) -> None:
    worker, queue = _worker(tmp_path, "keep")
    generate_s = worker.model.sleep_s(worker.model.generate_s)  # 0.04
    ended: list[float] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.01)
        in_flight = worker.engine._in_flight
        assert in_flight > 0
        held = [asyncio.create_task(worker.engine.generate()) for _ in range(2)]
        await asyncio.sleep(generate_s / 2)
        await worker.start_weight_update(1)
        assert not any(h.done() for h in held), "the round waited for no generation to end"
        assert worker.engine._in_flight == in_flight + 2, "paused, not ended"
        await asyncio.sleep(2 * generate_s)  # paused: none finishes meanwhile
        assert worker.engine._in_flight == in_flight + 2
        assert not any(h.done() for h in held)
        resumed = loop.time()
        await worker.finish_weight_update()
        assert await asyncio.gather(*held) == [0, 0], "counted as the oldest version's"
        ended.append(loop.time() - resumed)
        await asyncio.sleep(0.5)
        running.cancel()

    asyncio.run(scenario())
    # what was left of the reply (about half), after its KV was recomputed: a sleep never
    # ends early, so a reply that had not paused would be done already
    assert ended[0] > generate_s / 4
    assert worker.stats().policy_version == 1
    assert _versions(queue) == {0, 1}
