"""The cluster simulation's model and its engine's weight-update gate, without Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer._config import load_config
from agenthub.trainer._sim import SimModel, SimRolloutWorker, _SimEngine


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


async def _until(ready: Callable[[], bool], what: str) -> None:
    """Wait for `ready()`: how soon the worker gets there depends on how busy the machine is."""
    for _ in range(20_000):  # 20 s at most
        if ready():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{what} did not happen within 20 s")


@pytest.mark.parametrize("weight_update", ["drain", "keep"])
def test_a_weight_update_holds_new_generations_and_the_run_goes_on_with_the_new_version(
    tmp_path: Path, weight_update: str
) -> None:
    worker, queue = _worker(tmp_path, weight_update)
    engine = worker.engine

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        await _until(lambda: engine._in_flight > 0, "a generation")
        # no await between the check above and the round's start: what was in flight still is
        await worker.start_weight_update(1)
        if weight_update == "drain":
            assert engine._in_flight == 0, "the round waited for the generations"
        else:
            assert engine._in_flight > 0, "the round waited for no generation to end"
        in_flight = engine._in_flight
        await asyncio.sleep(0.06)  # longer than a generation: none may start meanwhile
        assert engine._in_flight <= in_flight
        await worker.finish_weight_update()
        await _until(lambda: 1 in _versions(queue), "a group with the new version's tokens")
        running.cancel()

    asyncio.run(scenario())
    assert worker.stats().policy_version == 1
    assert _versions(queue) == {0, 1}


def test_a_keeping_weight_update_pauses_generations_in_flight_and_they_go_on_after() -> None:
    # The engine alone, with no worker starting and ending generations around the two watched
    # here; a generation lasts 0.4 s, far longer than the few loop turns before the pause.
    model = SimModel(time_scale=1 / 10)
    engine = _SimEngine(model, keep=True)
    generate_s = model.sleep_s(model.generate_s)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        held = [asyncio.create_task(engine.generate()) for _ in range(2)]
        await _until(lambda: engine._in_flight == 2, "both generations' start")
        await engine.start_update(1)
        assert not any(h.done() for h in held), "the round waited for no generation to end"
        late = asyncio.create_task(engine.generate())
        await asyncio.sleep(2 * generate_s)  # paused: none finishes meanwhile, none starts
        assert engine._in_flight == 2, "paused, not ended, and the new one held back"
        assert not any(h.done() for h in [*held, late])
        resumed = loop.time()
        await engine.finish_update()
        assert await asyncio.gather(*held) == [0, 0], "counted as the oldest version's"
        ended = loop.time() - resumed
        assert await late == 1, "held back until the new weights were in"
        return ended

    ended = asyncio.run(scenario())
    # what was left of the reply (nearly all of it), after its KV was recomputed: a sleep
    # never ends early, so a reply that had not paused would be done already
    assert ended > generate_s / 2
