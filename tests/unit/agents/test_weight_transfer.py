"""The agenthub-gloo weight-transfer backend over a real gloo group in this process: the trainer
side broadcasts, worker sides (threads standing in for vLLM's workers, each loading into a
recording model) receive every tensor bit for bit, in chunks both sides cut alike. The same
backend inside vLLM: tests/integration/agents/test_weight_sync.py."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the weight-transfer backend needs the train extra")

import torch

from agenthub.agents._vllm_compat import ParamMeta, WeightSource, weight_transfer_config
from agenthub.agents._weight_transfer import (
    BACKEND,
    GlooTrainerInitInfo,
    GlooTrainerWeightTransferEngine,
    GlooUpdateInfo,
    GlooWeightTransferEngine,
    chunks,
)
from agenthub.trainer._weight_sync import _free_port

WEIGHTS = {
    "embed.weight": torch.randn(50, 8),
    "layer.0.weight": torch.randn(8, 8).to(torch.bfloat16),
    "layer.0.bias": torch.randn(8),
    "flags": torch.tensor([True, False, True]),  # every dtype travels as its bytes
    "buckets": torch.arange(12, dtype=torch.int64).reshape(3, 4),
    "head.weight": torch.randn(300, 8),  # larger than a chunk: travels alone
}


def _meta(name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> ParamMeta:
    return ParamMeta(name, dtype, shape)


def test_chunks_are_consecutive_runs_within_the_byte_budget() -> None:
    meta = [_meta("a", (10,)), _meta("b", (10,)), _meta("c", (100,)), _meta("d", (5,))]
    runs = list(chunks(meta, chunk_bytes=80))
    assert [[p.name for p in run] for run in runs] == [["a", "b"], ["c"], ["d"]]
    assert [p for run in runs for p in run] == meta
    assert list(chunks([], 80)) == []


def test_update_info_round_trips_its_metadata_and_rejects_ragged_lists() -> None:
    meta = [_meta("w", (2, 3), torch.bfloat16), _meta("b", (3,))]
    assert GlooUpdateInfo.of(meta).params() == meta
    with pytest.raises(ValueError, match="differ in length"):
        GlooUpdateInfo(names=["w"], dtype_names=[], shapes=[[1]])


class Source(WeightSource):
    def __init__(self, weights: dict[str, torch.Tensor], declared: list[ParamMeta] | None = None):
        self.weights = weights
        self.declared = declared

    def metadata(self) -> list[ParamMeta]:
        if self.declared is not None:
            return self.declared
        return [ParamMeta(k, v.dtype, tuple(v.shape)) for k, v in self.weights.items()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self.weights.items()


class RecordingModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loaded: dict[str, torch.Tensor] = {}
        self.calls = 0

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self.calls += 1
        self.loaded.update((name, tensor.clone()) for name, tensor in weights)


def _worker(model: RecordingModel) -> GlooWeightTransferEngine:
    vllm_config: Any = SimpleNamespace(
        parallel_config=SimpleNamespace(data_parallel_index=0, world_size=1, rank=0),
        model_config=None,
    )
    return GlooWeightTransferEngine(
        weight_transfer_config(BACKEND), vllm_config, torch.device("cpu"), model
    )


class ThreadedWorkers:
    """The client side of vLLM's protocol, with each worker engine on a thread of its own
    (they block in the group's rendezvous and broadcasts, as vLLM's workers do)."""

    def __init__(self, engines: list[GlooWeightTransferEngine]) -> None:
        self.engines = engines
        self.calls: list[str] = []
        self.pool = ThreadPoolExecutor(max_workers=len(engines))

    def _each(self, call: Any) -> None:
        for done in [self.pool.submit(call, i, e) for i, e in enumerate(self.engines)]:
            done.result(timeout=60)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.calls.append("init")
        self._each(
            lambda i, e: e.init_transfer_engine(
                e.parse_init_info({**init_info, "rank_offset": 1 + i})
            )
        )

    def start_weight_update(self) -> None:
        self.calls.append("start")

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.calls.append("update")
        self._each(lambda i, e: e.update_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.calls.append("finish")


def _connect(
    workers: int, source: WeightSource, chunk_bytes: int = 512
) -> tuple[GlooTrainerWeightTransferEngine, ThreadedWorkers, list[RecordingModel]]:
    models = [RecordingModel() for _ in range(workers)]
    client = ThreadedWorkers([_worker(m) for m in models])
    info = GlooTrainerInitInfo(
        master_address="127.0.0.1",
        master_port=_free_port(),
        world_size=1 + workers,
        chunk_bytes=chunk_bytes,
        timeout_s=30,
        rank=0,
    )
    sender = GlooTrainerWeightTransferEngine.trainer_init(info, client=client, source=source)
    return sender, client, models


def test_every_worker_receives_every_tensor_exactly_in_chunks() -> None:
    sender, client, models = _connect(2, Source(WEIGHTS))
    try:
        sender.send_weights()
        assert client.calls == ["init", "start", "update", "finish"]
        for model in models:
            assert model.loaded.keys() == WEIGHTS.keys()
            for name, tensor in WEIGHTS.items():
                assert model.loaded[name].dtype == tensor.dtype
                assert torch.equal(model.loaded[name], tensor), name
            assert model.calls == len(list(chunks(Source(WEIGHTS).metadata(), 512))) > 1

        changed = {k: v + 1 for k, v in WEIGHTS.items()}
        sender.source = Source(changed)
        sender.send_weights()
        assert all(torch.equal(models[1].loaded[k], v) for k, v in changed.items())
    finally:
        sender.shutdown()
        for engine in client.engines:
            engine.shutdown()


def test_a_source_that_contradicts_its_metadata_is_refused_by_name() -> None:
    declared = [ParamMeta("embed.weight", torch.float32, (50, 8))]
    sender, client, _ = _connect(1, Source({"embed.weight": torch.zeros(8, 50)}, declared))
    try:
        with pytest.raises(ValueError, match=r"'embed.weight' torch.float32 \(8, 50\)"):
            sender._broadcast(declared, lambda: None)
    finally:
        sender.shutdown()
        client.engines[0].shutdown()


def test_weights_before_the_group_is_joined_are_an_error() -> None:
    with pytest.raises(RuntimeError, match="before init_weight_transfer_engine"):
        _worker(RecordingModel()).receive_weights(GlooUpdateInfo(["w"], ["float32"], [[1]]))
