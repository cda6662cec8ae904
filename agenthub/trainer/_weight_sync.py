"""Weight sync from the learner to the rollout workers' engines through vLLM's weight-transfer
API: GPU to GPU where the learner and the engines are on GPUs (`nccl` between GPUs, `ipc` on
a shared one: `_gpu_transfer`), agenthub's gloo backend elsewhere.

The learner is the sender (rank 0 of the transfer group) and drives each round from its own
process: `WorkersClient` is vLLM's `VLLMWeightSyncClient` over the rollout worker actors, which
hold new requests back while their engines receive, and `LearnerSource` is the learner's
policy as vLLM's `WeightSource`, gathered from every rank under ZeRO-3.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agenthub.agents._vllm_compat import ParamMeta, WeightSource, trainer_weight_transfer
from agenthub.agents._weight_transfer import BACKEND as GLOO_BACKEND
from agenthub.agents._weight_transfer import chunks
from agenthub.trainer._config import RayConfig
from agenthub.trainer._gpu_transfer import BUCKET_BYTES, IpcSender, NcclSender

__all__ = ["EngineClient", "LearnerSource", "WorkersClient", "open_sender", "transfer_backend"]


def transfer_backend(ray: RayConfig) -> str:
    """`ipc` when the engine shares the learner's GPU (`ray.colocate`); `nccl` when the
    learner and every engine hold whole GPUs of their own; gloo otherwise. NCCL cannot join
    two processes on one GPU, which fractional shares may be; gloo carries CPU copies, so a
    learner and engines on any devices still sync."""
    if ray.colocate:
        return "ipc"
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
            w.init_weight_transfer.remote(_placed(init_info, offset))
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


def _placed(init_info: dict[str, Any], offset: int) -> dict[str, Any]:
    """A group backend's init info with an engine's first rank in the group; a backend
    without a group (`ipc`: no `world_size`) takes none."""
    return {**init_info, "rank_offset": offset} if "world_size" in init_info else init_info


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
        self._wait(self.engine.init_weight_transfer(_placed(init_info, 1)))

    def start_weight_update(self) -> None:
        self._wait(self.engine.start_weight_update(self.version))

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._wait(self.engine.receive_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._wait(self.engine.finish_weight_update())


class LearnerSource(WeightSource):  # type: ignore[misc]
    """The policy's parameters under their checkpoint names (what vLLM's `load_weights`
    takes). A tied output layer is sent under its own name too: vLLM's CPU kernels keep a
    repacked copy of `lm_head`, which stays old unless it is loaded.

    `buckets()` hands them over in runs of at most `bucket_bytes` (a larger parameter alone);
    under ZeRO-3 each run is gathered from every rank while it is handed over and released
    before the next, so at most one bucket of the model is whole at a time. Every rank
    iterates the same runs, in step (the gathers are collectives). `gather` is DeepSpeed's
    `GatheredParameters` unless given."""

    def __init__(
        self,
        module: Any,
        zero3: bool,
        bucket_bytes: int = BUCKET_BYTES,
        gather: Callable[[list[Any]], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.module = module
        self.zero3 = zero3
        self.bucket_bytes = bucket_bytes
        self.gather = gather

    def _named(self) -> Iterator[tuple[str, Any]]:
        return self.module.named_parameters(remove_duplicate=False)  # type: ignore[no-any-return]

    def metadata(self) -> list[ParamMeta]:
        return [
            ParamMeta(name, p.dtype, tuple(p.ds_shape if self.zero3 else p.shape))
            for name, p in self._named()
        ]

    def _gathered(self, params: list[Any]) -> contextlib.AbstractContextManager[Any]:
        if not self.zero3:
            return contextlib.nullcontext()
        if self.gather is not None:
            return self.gather(params)
        from deepspeed.runtime.zero import GatheredParameters

        return GatheredParameters(params)  # type: ignore[no-any-return]

    def buckets(self) -> Iterator[list[tuple[str, Any]]]:
        named = list(self._named())
        start = 0
        for run in chunks(self.metadata(), self.bucket_bytes):
            members = named[start : start + len(run)]
            start += len(run)
            unique = list({id(p): p for _, p in members}.values())  # a tied weight once
            with self._gathered(unique):
                yield [(name, p.detach()) for name, p in members]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for bucket in self.buckets():
            yield from bucket


def open_sender(
    module: Any, zero3: bool, backend: str, workers: Sequence[Any], ranks: Sequence[int]
) -> tuple[Any, WorkersClient]:
    """Open the transfer group with every worker's engine and return the trainer-side
    engine (`send_weights()` runs one round) with its client."""
    import ray

    from agenthub.agents._weight_transfer import GlooTrainerInitInfo, register

    client = WorkersClient(workers, ranks)
    source = LearnerSource(module, zero3)
    if backend == "ipc":
        return IpcSender.open(client, source), client
    rendezvous = {
        "master_address": ray.util.get_node_ip_address(),
        "master_port": _free_port(),
        "world_size": WorkersClient.world_size(ranks),
    }
    if backend == "nccl":
        return NcclSender.open(client, source, rendezvous), client
    register()
    init_info = GlooTrainerInitInfo(**rendezvous, rank=0)
    return trainer_weight_transfer(init_info, client=client, source=source), client


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])
