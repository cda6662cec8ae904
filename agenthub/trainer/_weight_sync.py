"""Weight sync from the learner to the rollout workers' engines through vLLM's weight-transfer
API: NCCL where the learner and the engines are on GPUs, agenthub's gloo backend elsewhere.

The learner is the sender (rank 0 of the transfer group) and drives each round from its own
process: `WorkersClient` is vLLM's `VLLMWeightSyncClient` over the rollout worker actors, which
hold new requests back while their engines receive, and `LearnerSource` is the learner's
policy as vLLM's `WeightSource`, gathered from every rank under ZeRO-3.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from agenthub.agents._vllm_compat import (
    ParamMeta,
    WeightSource,
    nccl_trainer_init_info,
    trainer_weight_transfer,
)
from agenthub.agents._weight_transfer import BACKEND as GLOO_BACKEND
from agenthub.trainer._config import RayConfig

__all__ = ["EngineClient", "LearnerSource", "WorkersClient", "open_sender", "transfer_backend"]


def transfer_backend(ray: RayConfig) -> str:
    """NCCL when the learner and every engine hold whole GPUs of their own; gloo otherwise.
    NCCL cannot join two processes on one GPU, which fractional shares may be; gloo carries
    CPU copies, so a learner and engines on any devices still sync."""
    return "nccl" if ray.learner_num_gpus >= 1 and ray.worker_num_gpus >= 1 else GLOO_BACKEND


class WorkersClient:
    """vLLM's trainer-side control plane (`VLLMWeightSyncClient`) over rollout worker actors.

    vLLM's trainer engines hand every engine the same worker init info; each engine here is
    its own vLLM instance with `ranks[i]` workers, so the client gives each its own place in
    the group after the trainer (rank 0). `version` is the policy version of the next round:
    an engine refuses one older than what it serves before anything is sent."""

    def __init__(self, workers: Sequence[Any], ranks: Sequence[int]) -> None:
        if len(workers) != len(ranks):
            raise ValueError(f"{len(workers)} workers but {len(ranks)} rank counts")
        self.workers = list(workers)
        self.offsets = [1 + sum(ranks[:i]) for i in range(len(ranks))]
        self.version = 0
        self.ending: list[Any] = []
        """The last round's ends, not waited for (`finish_weight_update`)."""

    @staticmethod
    def world_size(ranks: Sequence[int]) -> int:
        return 1 + sum(ranks)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._all(
            w.init_weight_transfer.remote({**init_info, "rank_offset": offset})
            for w, offset in zip(self.workers, self.offsets, strict=True)
        )

    def start_weight_update(self) -> None:
        """Begin a round on every engine, once each has ended the last one."""
        self.wait_ended()
        self._all(w.start_weight_update.remote(self.version) for w in self.workers)

    def wait_ended(self) -> None:
        """Wait for every engine to end the last round, well or not: one that failed to is
        broken or dead, and says so at the next call."""
        import ray

        if self.ending:
            ray.wait(self.ending, num_returns=len(self.ending))
            self.ending = []

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        self._all(w.receive_weights.remote(update_info) for w in self.workers)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """End the round on every engine without waiting for them: the learner goes on to its
        next step while the engines resume (the next round begins once all have). Rollouts
        admitted for the new version meanwhile wait in an engine still ending the round, and
        are sampled by the new weights."""
        self.ending = [w.finish_weight_update.remote() for w in self.workers]

    @staticmethod
    def _all(refs: Iterator[Any]) -> None:
        import ray

        ray.get(list(refs))


class EngineClient:
    """vLLM's trainer-side control plane over a `VLLMEngine` in this process: a trainer that
    drives its rounds from a thread (they block), while the engine runs on `loop`."""

    def __init__(self, engine: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.loop = loop
        self.version = 0

    def _wait(self, coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._wait(self.engine.init_weight_transfer({**init_info, "rank_offset": 1}))

    def start_weight_update(self) -> None:
        self._wait(self.engine.start_weight_update(self.version))

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._wait(self.engine.receive_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._wait(self.engine.finish_weight_update())


class LearnerSource(WeightSource):
    """The policy's parameters under their checkpoint names (what vLLM's `load_weights`
    takes). A tied output layer is sent under its own name too: vLLM's CPU kernels keep a
    repacked copy of `lm_head`, which stays old unless it is loaded. Under ZeRO-3 the whole
    policy is gathered for the length of one iteration."""

    def __init__(self, module: Any, zero3: bool) -> None:
        self.module = module
        self.zero3 = zero3

    def _named(self) -> Iterator[tuple[str, Any]]:
        return self.module.named_parameters(remove_duplicate=False)  # type: ignore[no-any-return]

    def metadata(self) -> list[ParamMeta]:
        return [
            ParamMeta(name, p.dtype, tuple(p.ds_shape if self.zero3 else p.shape))
            for name, p in self._named()
        ]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        gathered: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if self.zero3:
            from deepspeed.runtime.zero import GatheredParameters

            gathered = GatheredParameters(list(self.module.parameters()))
        with gathered:
            for name, p in self._named():
                yield name, p.detach()


def open_sender(
    module: Any, zero3: bool, backend: str, workers: Sequence[Any], ranks: Sequence[int]
) -> tuple[Any, WorkersClient]:
    """Open the transfer group with every worker's engine and return vLLM's trainer-side
    engine (`send_weights()` runs one round) with its client."""
    import ray

    from agenthub.agents._weight_transfer import GlooTrainerInitInfo, register

    client = WorkersClient(workers, ranks)
    rendezvous = {
        "master_address": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        "master_port": _free_port(),
        "world_size": WorkersClient.world_size(ranks),
        "rank": 0,
    }
    init_info: Any
    if backend == GLOO_BACKEND:
        register()
        init_info = GlooTrainerInitInfo(**rendezvous)
    else:
        init_info = nccl_trainer_init_info(**rendezvous)
    source = LearnerSource(module, zero3)
    sender = trainer_weight_transfer(init_info, client=client, source=source)
    return sender, client


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])
