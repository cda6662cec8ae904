"""The cluster simulation (`agenthub.trainer._sim`) under the real Trainer on Ray: what
`benchmarks/cluster_sim.py` measures is the real loop, queue, admission and weight sync."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the cluster simulation needs the train extra")

import agenthub
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._control import RunSummary
from agenthub.trainer._loop import Trainer
from agenthub.trainer._metrics import read_metrics
from agenthub.trainer._sim import SimCluster, SimModel, SimRolloutWorker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ray_cpus() -> Iterator[None]:
    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def _run(
    tmp_path: Path,
    staleness: int,
    model: SimModel | None = None,
    *,
    worker: type[SimRolloutWorker] = SimRolloutWorker,
    steps: int = 4,
) -> tuple[list[dict[str, float]], SimCluster, RunSummary]:
    agenthub.register("cluster-sim", "agenthub.trainer._sim:SimTasks", override=True)
    model = model or SimModel(time_scale=1 / 400)
    model.save(tmp_path / "sim-model.json")
    cfg = load_config(
        [],
        [
            "env=cluster-sim",
            "ray.rollout_workers=2",
            f"algorithm.max_staleness={staleness}",
            "algorithm.batch_groups=2",
            "rollout.n_samples_per_prompt=4",
            "rollout.concurrency=8",
            "algorithm.filter_groups=false",
            "eval.every=0",
            "run.wandb=disabled",
            f"run.max_steps={steps}",
            "run.checkpoint_every=4",
        ],
    )
    made: list[SimCluster] = []

    def cluster(c: TrainConfig, version: int, drawn: list[int]) -> SimCluster:
        path = tmp_path / "sim-model.json"
        made.append(SimCluster(c, path, version, drawn, rollout_worker=worker))
        return made[-1]

    summary = Trainer(cfg, tmp_path / "run", log=lambda _: None, cluster=cluster).run()
    assert summary.steps == steps
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "train/reward" in r]
    return records, made[0], summary


@pytest.mark.timeout(180)
@pytest.mark.parametrize("staleness", [0, 1])
def test_the_simulated_cluster_trains_through_the_real_trainer(
    tmp_path: Path, ray_cpus: None, staleness: int
) -> None:
    records, cluster, _ = _run(tmp_path, staleness)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["staleness/max"] <= staleness for r in records)
    # every step learned and sent its weights: a learn and a transfer interval each
    assert len(cluster.learner_busy) == 2 * 4
    starts = [a for a, _ in cluster.learner_busy]
    assert starts == sorted(starts), "the learner does one thing at a time"
    model = SimModel(time_scale=1 / 400)
    tokens = 2 * 4 * model.trajectory_tokens
    learn_s = [b - a for a, b in cluster.learner_busy[::2]]
    assert min(learn_s) >= model.sleep_s(model.learn_s(tokens)) * 0.95
    assert cluster.learner_sent == [(v, v) for v in range(1, 5)], "each version is its step's"


@pytest.mark.timeout(180)
def test_a_step_whose_batch_is_ready_goes_to_the_learner_behind_the_weight_sync(
    tmp_path: Path, ray_cpus: None
) -> None:
    # A learner ten times slower than the model's: every next batch is ready as a step ends.
    slow = SimModel(time_scale=1 / 400, learner_s_per_token=96e-5)
    records, cluster, _ = _run(tmp_path, 4, slow)
    assert [r["learner/queued"] for r in records] == [0, 1, 1, 1]
    # Ray ran the calls in the order they were made: each sync sent its own step's weights.
    assert cluster.learner_sent == [(v, v) for v in range(1, 5)]
    starts = [a for a, _ in cluster.learner_busy]
    assert starts == sorted(starts) and len(starts) == 8


class _DiesInSync(SimRolloutWorker):
    """Rollout worker 1 dies inside the weight sync of policy 2, once it has the weights (the
    learner is then between two calls of its round): the other engine has received them, and
    the round is left open."""

    async def receive_weights(self, update_info: dict[str, Any]) -> None:
        await super().receive_weights(update_info)
        if self.rank == 1 and self.life == 0 and self.engine._incoming == 2:
            os._exit(1)


@pytest.mark.timeout(180)
def test_a_worker_lost_inside_a_weight_sync_is_replaced_and_the_run_goes_on(
    tmp_path: Path, ray_cpus: None
) -> None:
    records, cluster, summary = _run(tmp_path, 1, worker=_DiesInSync, steps=6)
    assert [r["step"] for r in records] == list(range(1, 7)), "every step once, in order"
    assert summary.faults.seen == summary.faults.survived == 1
    assert summary.rollout_workers == 2
    # The sync of policy 2 failed with the worker; the replacement's sync sent the learner's
    # policy to both engines: 2 again, or 3 when its next step was queued behind the failed
    # sync (that step's own sync is the replacement's). Every version was sent, in order.
    versions = [v for v, _ in cluster.learner_sent]
    assert versions[:2] == [1, 2] and versions == sorted(versions)
    assert set(versions) == set(range(1, 7))


@pytest.mark.timeout(120)
def test_the_learner_goes_on_while_engines_end_a_round_and_the_next_waits_for_them(
    ray_cpus: None,
) -> None:
    import threading

    import ray

    from agenthub.trainer._weight_sync import WorkersClient

    @ray.remote
    class Engine:
        """An engine whose rounds end when the test says (an async actor, as rollout
        workers are: calls run concurrently, so only the client can keep rounds apart)."""

        def __init__(self) -> None:
            self.log: list[str] = []
            self.ended = asyncio.Event()

        async def start_weight_update(self, version: int) -> None:
            self.log.append(f"start {version}")

        async def receive_weights(self, update_info: dict[str, object]) -> None:
            self.log.append("received")

        async def finish_weight_update(self) -> None:
            await self.ended.wait()
            self.log.append("ended")

        async def end(self) -> None:
            self.ended.set()

        async def seen(self) -> list[str]:
            return list(self.log)

    engine = Engine.remote()  # type: ignore[attr-defined]
    client = WorkersClient([engine], [1])
    client.version = 1
    client.start_weight_update()
    client.update_weights({})
    client.finish_weight_update()  # returns while the engine still ends the round
    assert ray.get(engine.seen.remote()) == ["start 1", "received"]
    client.version = 2
    second = threading.Thread(target=client.start_weight_update)
    second.start()
    second.join(timeout=1.0)
    assert second.is_alive(), "the next round waits for the last one's end"
    ray.get(engine.end.remote())
    second.join(timeout=30)
    assert not second.is_alive()
    assert ray.get(engine.seen.remote()) == ["start 1", "received", "ended", "start 2"]
