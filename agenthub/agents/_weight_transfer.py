"""A CPU backend for vLLM's weight-transfer API: the learner broadcasts its weights to the
engines' workers over a gloo process group.

vLLM (0.26 and later) syncs a trainer into running engines through one protocol whatever the
transport: the trainer opens a group with the workers (`init_weight_transfer_engine`), then
each round `start_weight_update` / `update_weights` / `finish_weight_update`, with the trainer
broadcasting while the workers receive and load layer by layer. Its built-in backends (`nccl`,
`ipc`, ...) need CUDA. This one, `agenthub-gloo`, carries the same rounds over gloo, so a run
without a GPU goes through the same code as one with (`nccl`), and only the transport differs.

The parameters travel one broadcast each, as bytes, in the order of the round's metadata;
the workers load them in runs of at most `chunk_bytes` (both sides cut the same runs from the
metadata), so a worker holds at most one run beyond its model at a time. One broadcast per
tensor, not one per packed run, saves the sender a copy of every run: measured 0.51-0.53 s a
sync of 136M float32 parameters against 0.66-0.72 s packed. The worker side is registered in
each vLLM process by the `vllm.general_plugins` entry point (`register`); the trainer side is
registered by calling `register` there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from agenthub.agents._vllm_compat import (
    ParamMeta,
    TrainerEngineBase,
    TrainerInitInfo,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
    begin_layerwise_reload,
    destroy_stateless_process_group,
    end_layerwise_reload,
    register_weight_transfer,
    stateless_process_group,
)

__all__ = [
    "BACKEND",
    "GlooInitInfo",
    "GlooTrainerInitInfo",
    "GlooTrainerWeightTransferEngine",
    "GlooUpdateInfo",
    "GlooWeightTransferEngine",
    "register",
]

BACKEND = "agenthub-gloo"
CHUNK_BYTES = 64 * 2**20
# How long one rendezvous or one tensor's broadcast may wait for the other side: a peer that
# died mid-round fails the round after this, not never.
TIMEOUT_S = 120.0


@dataclass(kw_only=True)
class GlooInitInfo(WeightTransferInitInfo):  # type: ignore[misc]
    """What a worker needs to join the trainer's group: the trainer's TCP store, the rank of
    this engine's first worker (the trainer is rank 0) and the size of the whole group."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    chunk_bytes: int = CHUNK_BYTES
    timeout_s: float = TIMEOUT_S


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):  # type: ignore[misc]
    """One round's parameters, in the order they are sent."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"names, dtype_names and shapes differ in length: {len(self.names)}, "
                f"{len(self.dtype_names)}, {len(self.shapes)}"
            )

    @classmethod
    def of(cls, meta: Sequence[ParamMeta]) -> GlooUpdateInfo:
        return cls(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
            shapes=[list(m.shape) for m in meta],
        )

    def params(self) -> list[ParamMeta]:
        return [
            ParamMeta(name, getattr(torch, dtype), tuple(shape))
            for name, dtype, shape in zip(self.names, self.dtype_names, self.shapes, strict=True)
        ]


def chunks(meta: Sequence[ParamMeta], chunk_bytes: int) -> Iterator[list[ParamMeta]]:
    """The parameters cut into consecutive runs of at most `chunk_bytes` (a larger parameter
    travels alone). Both sides compute the same runs from the same metadata."""
    run: list[ParamMeta] = []
    size = 0
    for param in meta:
        nbytes = _nbytes(param)
        if run and size + nbytes > chunk_bytes:
            yield run
            run, size = [], 0
        run.append(param)
        size += nbytes
    if run:
        yield run


def _nbytes(param: ParamMeta) -> int:
    return int(torch.Size(param.shape).numel() * param.dtype.itemsize)


def open_group(
    address: str, port: int, rank: int, world_size: int, timeout_s: float
) -> torch.distributed.ProcessGroup:
    """A gloo group of its own (the process's default group, if any, is left alone). Rank 0
    hosts the rendezvous store at `address:port`."""
    group = stateless_process_group(address, port, rank, world_size, "gloo", timeout_s)
    assert isinstance(group, torch.distributed.ProcessGroup)
    return group


def close_group(group: torch.distributed.ProcessGroup) -> None:
    destroy_stateless_process_group(group)


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):  # type: ignore[misc]
    """The worker side, inside vLLM: receives each run of tensors and loads it through the model's
    `load_weights` within vLLM's layerwise reload (which redoes any kernel-specific repacking)."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group: torch.distributed.ProcessGroup | None = None
        self.chunk_bytes = CHUNK_BYTES
        self.reloading = False  # a layerwise reload begun and not finalized

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        self.shutdown()  # a new group (the old one lost a peer): the old one's sockets go
        config = self.parallel_config
        rank = config.data_parallel_index * config.world_size + config.rank
        self.chunk_bytes = init_info.chunk_bytes
        self.group = open_group(
            init_info.master_address,
            init_info.master_port,
            init_info.rank_offset + rank,
            init_info.world_size,
            init_info.timeout_s,
        )

    def start_weight_update(self) -> None:
        if self.reloading:
            # The last round was cut off part-way: vLLM's reload would skip the layers it left
            # loaded in part and count the new round's weights on top of theirs, processing
            # them before they are all in. Finalized first, every layer starts afresh.
            end_layerwise_reload(self.model, self.model_config)
        begin_layerwise_reload(self.model)
        self.reloading = True

    def finish_weight_update(self) -> None:
        end_layerwise_reload(self.model, self.model_config)
        self.reloading = False

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class ends with an accelerator synchronize, which fails without one.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("weights sent before init_weight_transfer_engine joined the group")
        load: Any = self.model.load_weights
        for run in chunks(update_info.params(), self.chunk_bytes):
            received = []
            for param in run:
                data = torch.empty(_nbytes(param), dtype=torch.uint8)
                self.group.broadcast(data, 0).wait()
                received.append((param.name, data.view(param.dtype).view(param.shape)))
            load(received)

    def shutdown(self) -> None:
        if self.group is not None:
            close_group(self.group)
            self.group = None


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):  # type: ignore[misc]
    """The trainer's side of the group: it is rank 0 and hosts the store at
    `master_address:master_port`; `world_size` counts it and every engine worker."""

    backend: ClassVar[str] = BACKEND

    master_address: str
    master_port: int
    world_size: int
    chunk_bytes: int = CHUNK_BYTES
    timeout_s: float = TIMEOUT_S


class GlooTrainerWeightTransferEngine(TrainerEngineBase):  # type: ignore[misc]
    """The trainer side: opens the group as rank 0 while the client has the workers join it,
    then each `send_weights` drives one round through the client, broadcasting while the
    workers receive. A single trainer process is the only sender."""

    init_info_cls = GlooTrainerInitInfo

    def __init__(
        self,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource,
        group: torch.distributed.ProcessGroup,
        chunk_bytes: int,
    ) -> None:
        super().__init__(client=client, source=source, is_sender=True)
        self.group: torch.distributed.ProcessGroup | None = group
        self.chunk_bytes = chunk_bytes

    @classmethod
    def trainer_init(
        cls,
        init_info: GlooTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> GlooTrainerWeightTransferEngine:
        if source is None:
            raise ValueError("the agenthub-gloo trainer engine needs a WeightSource")
        if not init_info.is_sender:
            raise ValueError("the agenthub-gloo backend has one trainer process, rank 0")
        worker_info = GlooInitInfo(
            master_address=init_info.master_address,
            master_port=init_info.master_port,
            rank_offset=1,
            world_size=init_info.world_size,
            chunk_bytes=init_info.chunk_bytes,
            timeout_s=init_info.timeout_s,
        )
        # The workers block in the rendezvous until the trainer joins: both at once.
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(client.init_weight_transfer_engine, asdict(worker_info))
            group = open_group(
                init_info.master_address,
                init_info.master_port,
                0,
                init_info.world_size,
                init_info.timeout_s,
            )
            joined.result()
        return cls(client=client, source=source, group=group, chunk_bytes=init_info.chunk_bytes)

    def send_weights(self) -> None:
        """One round: start, broadcast while the workers receive, finish."""
        if self.group is None:
            raise RuntimeError("send_weights after shutdown")
        assert self.source is not None
        meta = self.source.metadata()
        self.client.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            received = pool.submit(self.client.update_weights, asdict(GlooUpdateInfo.of(meta)))

            def receiving() -> None:
                # A worker that failed does not come to the next broadcast: say why now,
                # rather than when the group's timeout ends that broadcast.
                if received.done():
                    received.result()

            try:
                self._broadcast(meta, receiving)
            except Exception:
                receiving()
                raise
            received.result()
        finally:
            # A broadcast that failed leaves the workers waiting in theirs until the group's
            # timeout: joining the thread here would turn the error into that wait.
            pool.shutdown(wait=False)
        self.client.finish_weight_update()

    def _broadcast(self, meta: list[ParamMeta], receiving: Callable[[], None]) -> None:
        assert self.group is not None and self.source is not None
        tensors = iter(self.source)
        for run in chunks(meta, self.chunk_bytes):
            receiving()
            for expected in run:
                name, tensor = next(tensors, (None, None))
                if tensor is None:
                    raise ValueError(
                        f"the weight source ended before {expected.name!r}; its metadata "
                        f"declared {len(meta)} parameters"
                    )
                if (name, tensor.dtype, tuple(tensor.shape)) != (
                    expected.name,
                    expected.dtype,
                    tuple(expected.shape),
                ):
                    raise ValueError(
                        f"the weight source yielded {name!r} {tensor.dtype} "
                        f"{tuple(tensor.shape)} where its metadata declared {expected.name!r} "
                        f"{expected.dtype} {tuple(expected.shape)}"
                    )
                data = tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8)
                self.group.broadcast(data, 0).wait()
        extra = next(tensors, None)  # also lets the source leave its gather context
        if extra is not None:
            raise ValueError(
                f"the weight source yielded {extra[0]!r} beyond the {len(meta)} parameters its "
                "metadata declared"
            )

    def shutdown(self) -> None:
        if self.group is not None:
            close_group(self.group)
            self.group = None


def register() -> None:
    """Register the `agenthub-gloo` backend with vLLM's worker and trainer factories (the
    `vllm.general_plugins` entry point; idempotent)."""
    register_weight_transfer(BACKEND, GlooWeightTransferEngine, GlooTrainerWeightTransferEngine)
