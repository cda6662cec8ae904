"""The learner's ranks as Ray actors: placed together, joined into one data-parallel group,
and called as one. What ranks on another node than the driver's write for the run directory
comes back through Ray (`agenthub.trainer._shipping`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthub._errors import AgentHubError
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._shipping import Shipment, receive, receive_replacing, ship

__all__ = ["LearnerGroup", "check_custom"]

PLACEMENT_TIMEOUT_S = 120.0
"""How long the learner's ranks may wait for room in the cluster before the run gives up."""


class LearnerGroup:
    """`ray.learner_ranks` learner actors (`LearnerWorker`, or `learner` with the same methods)
    in one placement group, one bundle of a CPU (and `ray.learner_num_gpus` GPUs, and
    `ray.learner_resources`) per rank. `model` is the policy's starting directory, shipped to
    ranks on other nodes than the driver's (a path: shipped here).

    `start()` joins the ranks into one DeepSpeed data-parallel group (gloo on CPU, NCCL on
    GPUs), rank 0's node address taken from Ray. Every call then goes to every rank, as
    DeepSpeed's collectives need; rank 0's answer is the group's. The weight sync is rank 0's:
    it alone joins the engines' transfer group."""

    def __init__(
        self, cfg: TrainConfig, model: Path | Shipment, learner: type | None = None
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from agenthub.trainer._workers import LearnerWorker

        self.ranks = ranks = cfg.ray.learner_ranks
        gpus = cfg.ray.learner_num_gpus
        bundle = {"CPU": 1.0} | ({"GPU": gpus} if gpus else {})
        _check_fits(ranks, bundle)
        custom = cfg.ray.learner_resources
        check_custom(f"the learner's {ranks} rank(s)", ranks, custom, "ray.learner_resources")
        bundle |= custom
        self.model = model if isinstance(model, Shipment) else ship(model)
        self.placement = placement_group([bundle] * ranks, strategy="PACK")
        config = cfg.model_dump(mode="json")
        extra: list[tuple[Any, ...]] = [()] if ranks == 1 else [(r, ranks) for r in range(ranks)]
        self.actors: list[Any] = [
            ray.remote(learner or LearnerWorker)
            .options(
                num_cpus=1,
                num_gpus=cfg.ray.learner_num_gpus,
                resources=cfg.ray.learner_resources or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement, placement_group_bundle_index=r
                ),
            )
            .remote(config, self.model, *args)
            for r, args in enumerate(extra)
        ]
        self.first = self.actors[0]

    async def start(self) -> None:
        """Wait for the ranks' places, then join them into one group (each rank's learner
        starts as it joins; a learner of one rank started with its actor)."""
        try:
            await asyncio.wait_for(self.placement.ready(), PLACEMENT_TIMEOUT_S)
        except TimeoutError:
            raise AgentHubError(
                f"the learner's {self.ranks} ranks found no room in the Ray cluster within "
                f"{PLACEMENT_TIMEOUT_S:g} s ({_resources()}); lower ray.learner_ranks, "
                "ray.learner_num_gpus or ray.rollout_workers, or add nodes"
            ) from None
        if self.ranks > 1:
            host, port = await self.first.rendezvous.remote()
            await self._all("join", host, port)

    async def _all(self, method: str, *args: Any) -> Any:
        """`method(*args)` on every rank at once; rank 0's result."""
        return (await self._each(method, *args))[0]

    async def _each(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every rank at once; each rank's result."""
        return list(await asyncio.gather(*(getattr(a, method).remote(*args) for a in self.actors)))

    async def open_weight_sync(self, workers: list[Any], ranks: list[int]) -> bool:
        """Join rank 0 to the engines' weight transfer; whether the learner trains in bf16."""
        await self.first.open_weight_sync.remote(workers, ranks)
        return bool(await self.first.uses_bf16.remote())

    async def step(self, batch: Any) -> dict[str, float]:
        """One learner step on `batch` (put into the object store once for all ranks)."""
        import ray

        ref = ray.put(batch)
        learned: dict[str, float] = await self._all("step", ref)
        return learned

    async def send_weights(self, version: int) -> float:
        return float(await self._all("send_weights", version))

    async def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = await self._all("state_dict")
        return state

    async def save_checkpoint(self, directory: Path, tag: str) -> None:
        """Every rank saves its part of checkpoint `tag` into `directory` (the files of a
        rank on another node are written here)."""
        for parcel in await self._each("save_checkpoint", str(directory), tag):
            receive(parcel, directory)

    async def save_model(self, directory: Path, about: dict[str, Any]) -> None:
        for parcel in await self._each("save_model", str(directory), about):
            receive_replacing(parcel, directory)

    async def load_checkpoint(self, directory: Path, tag: str) -> int:
        """Every rank loads checkpoint `tag` of `directory` (shipped to ranks on other nodes);
        the learner steps it holds."""
        return int(await self._all("load_checkpoint", ship(directory / tag)))

    def kill(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.placement)


def _resources() -> str:
    import ray

    total = ray.cluster_resources()
    free = ray.available_resources()
    return ", ".join(
        f"{free.get(k, 0.0):g} of {total.get(k, 0.0):g} {k}s free" for k in ("CPU", "GPU")
    )


def _check_fits(ranks: int, bundle: dict[str, float]) -> None:
    """Refuse ranks the whole cluster could never hold: Ray would wait for them for ever."""
    import ray

    total = ray.cluster_resources()
    for kind, each in bundle.items():
        have = float(total.get(kind, 0.0))
        if ranks * each > have:
            most = int(have // each)
            raise AgentHubError(
                f"ray.learner_ranks={ranks} needs {ranks * each:g} {kind}s ({each:g} per rank) "
                f"and the Ray cluster has {have:g}; set ray.learner_ranks to at most {most}"
                + (" or lower ray.learner_num_gpus" if kind == "GPU" else "")
                + ", or add nodes"
            )


def check_custom(what: str, count: int, resources: dict[str, float], setting: str) -> None:
    """Refuse `count` actors (`what`) that each ask for custom `resources` (`setting`) no
    nodes of the cluster have enough of: Ray would wait for them for ever."""
    import ray

    total = ray.cluster_resources()
    for kind, amount in resources.items():
        have = float(total.get(kind, 0.0))
        if count * amount > have:
            raise AgentHubError(
                f"{what} ask for {count * amount:g} of the custom resource {kind!r} ({setting}) "
                f"and the Ray cluster's nodes have {have:g}; start a node with `ray start "
                f"--resources='{{\"{kind}\": {count * amount:g}}}'`, or change {setting}"
            )
