"""Weights from the learner's GPU straight into the engines' GPUs, through vLLM's own worker
backends: `nccl` when the engines hold GPUs of their own (other GPUs, other nodes), `ipc` when
an engine shares the learner's GPU (`ray.colocate`).

The trainer side is agenthub's rather than vLLM's (`NCCLTrainerWeightTransferEngine`,
`IPCTrainerWeightTransferEngine`): those arrived only in vLLM 0.28 and 0.27, and iterate their
source in one piece, where agenthub's learner hands its weights over bucket by bucket
(`LearnerSource.buckets`), gathered one bucket at a time under ZeRO-3. Nothing passes through
host memory. A round is vLLM's: `start_weight_update`, `update_weights` (with the transfer),
`finish_weight_update`, driven through the same client as the gloo backend's
(`WorkersClient`, `EngineClient`), so engines pause and resume (`keep`) and the policy
version moves with the weights as they do on CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from agenthub.agents import _vllm_compat as compat
from agenthub.agents._vllm_compat import ParamMeta

__all__ = ["BUCKET_BYTES", "BucketedSource", "IpcSender", "NcclSender", "gpu_uuid", "share"]

BUCKET_BYTES = 512 * 2**20
"""How much of the model is gathered and in flight at once: a 0.5B bf16 model in two buckets,
a 70B one in ~280."""
NCCL_BUFFERS = 2
"""NCCL buffers in flight: one packing while the other is broadcast."""


class BucketedSource(Protocol):
    """The learner's weights as `(name, tensor)` runs, each valid until the next is asked
    for (`LearnerSource`)."""

    def metadata(self) -> list[ParamMeta]: ...

    def buckets(self) -> Iterator[list[tuple[str, Any]]]: ...

    def __iter__(self) -> Iterator[tuple[str, Any]]: ...


def _round(client: Any, update_info: dict[str, Any], transfer: Callable[[], None]) -> None:
    """One vLLM round whose transfer runs beside the workers' `update_weights` (they receive
    while the trainer sends). A worker that failed is said at once, not after the transfer's
    own timeout."""
    client.start_weight_update()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        received = pool.submit(client.update_weights, update_info)
        try:
            transfer()
        except Exception:
            if received.done():
                received.result()
            raise
        received.result()
    finally:
        pool.shutdown(wait=False)  # a transfer that failed leaves the workers in theirs
    client.finish_weight_update()


class NcclSender:
    """The trainer side of vLLM's `nccl` backend: rank 0 of a group with every engine worker,
    broadcasting the weights packed into `bucket_bytes` buffers (vLLM's packed producer,
    which the workers' consumer mirrors)."""

    def __init__(
        self,
        client: Any,
        source: BucketedSource,
        group: Any,
        packing: dict[str, Any],
        broadcast: Callable[[Iterator[tuple[str, Any]], Any, dict[str, Any]], None],
    ) -> None:
        self.client = client
        self.source = source
        self.group: Any = group
        self.packing = packing
        self.broadcast = broadcast

    @classmethod
    def open(
        cls,
        client: Any,
        source: BucketedSource,
        rendezvous: dict[str, Any],
        *,
        bucket_bytes: int = BUCKET_BYTES,
        open_group: Callable[[str, int, int], Any] = compat.nccl_trainer_group,
        broadcast: Callable[..., None] = compat.nccl_broadcast_packed,
    ) -> NcclSender:
        """Open the group (`rendezvous`: `master_address`, `master_port`, `world_size`):
        the workers join while this process does, as rank 0 on its current CUDA device."""
        packing = compat.nccl_packing(bucket_bytes, NCCL_BUFFERS)
        address, port = rendezvous["master_address"], rendezvous["master_port"]
        worker_info = compat.nccl_worker_init_info(
            {
                "master_address": address,
                "master_port": port,
                "rank_offset": 1,
                "world_size": rendezvous["world_size"],
            },
            packing,
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(client.init_weight_transfer_engine, worker_info)
            group = open_group(address, port, rendezvous["world_size"])
            joined.result()
        return cls(client, source, group, packing, broadcast)

    def send_weights(self) -> None:
        if self.group is None:
            raise RuntimeError("send_weights after shutdown")
        meta = self.source.metadata()
        info = compat.nccl_update_info(meta, self.packing)
        _round(
            self.client, info, lambda: self.broadcast(iter(self.source), self.group, self.packing)
        )

    def shutdown(self) -> None:
        self.group = None  # vLLM's communicator ends with its last reference


def share(tensor: Any) -> tuple[Any, ...]:
    """A CUDA tensor as the arguments another process rebuilds it from (torch's IPC)."""
    from torch.multiprocessing.reductions import reduce_tensor

    return tuple(reduce_tensor(tensor)[1])


def gpu_uuid() -> str:
    """The current GPU's UUID, by which an `ipc` worker finds its handle."""
    import torch

    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


def _synchronize() -> None:
    import torch

    torch.cuda.current_stream().synchronize()  # the engine reads what this stream wrote


class IpcSender:
    """The trainer side of vLLM's `ipc` backend, for an engine on the learner's own GPU: each
    bucket's tensors are handed over as CUDA IPC handles in one `update_weights` call, which
    returns once the engine has loaded (copied) them; then the bucket is let go and the next
    gathered. At most one bucket beyond the model is held at a time, on either side."""

    def __init__(
        self,
        client: Any,
        source: BucketedSource,
        *,
        uuid: str,
        share: Callable[[Any], tuple[Any, ...]] = share,
        synchronize: Callable[[], None] = _synchronize,
    ) -> None:
        self.client = client
        self.source = source
        self.uuid = uuid
        self.share = share
        self.synchronize = synchronize
        self._shut = False

    @classmethod
    def open(cls, client: Any, source: BucketedSource) -> IpcSender:
        client.init_weight_transfer_engine({})  # nothing to join: the handles say it all
        return cls(client, source, uuid=gpu_uuid())

    def send_weights(self) -> None:
        if self._shut:
            raise RuntimeError("send_weights after shutdown")
        self.client.start_weight_update()
        for bucket in self.source.buckets():
            tensors = [tensor.contiguous() for _, tensor in bucket]  # held until loaded
            meta = [
                ParamMeta(name, t.dtype, tuple(t.shape))
                for (name, _), t in zip(bucket, tensors, strict=True)
            ]
            handles = [{self.uuid: self.share(t)} for t in tensors]
            self.synchronize()
            self.client.update_weights(compat.ipc_update_info(meta, handles))
            del tensors, handles
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self._shut = True
