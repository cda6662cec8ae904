"""Weights GPU to GPU, what a CPU can check: the learner's buckets (gathered one at a time
under ZeRO-3), the choice of backend, the order of a round for `nccl` and `ipc` over a fake
client and transport, and the colocated turn's order. The transfers themselves run on a GPU
(`tests/gpu/test_weight_sync_gpu.py`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests._loop import settle

pytest.importorskip("vllm", reason="the weight sync needs the train extra")

import torch

from agenthub.agents import _vllm_compat as compat
from agenthub.trainer._colocate import GpuTurns
from agenthub.trainer._config import ConfigError, load_config
from agenthub.trainer._gpu_transfer import IpcSender, NcclSender
from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _placed, transfer_backend


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)  # 256 bytes
        self.layer = torch.nn.Linear(4, 4)  # 64 + 16 bytes
        self.head = torch.nn.Linear(4, 16, bias=False)
        self.head.weight = self.embed.weight  # tied: sent under both names


class Gathers:
    """A stand-in for DeepSpeed's `GatheredParameters` that records what is whole when."""

    def __init__(self) -> None:
        self.whole: set[int] = set()
        self.most = 0
        self.log: list[list[int]] = []

    @contextlib.contextmanager
    def __call__(self, params: list[Any]) -> Iterator[None]:
        ids = [id(p) for p in params]
        assert not self.whole, "a bucket gathered while another is still whole"
        self.whole.update(ids)
        self.most = max(self.most, sum(p.numel() * p.element_size() for p in params))
        self.log.append(ids)
        try:
            yield
        finally:
            self.whole.clear()


def test_the_learner_hands_its_weights_over_bucket_by_bucket_gathering_one_at_a_time() -> None:
    model, gathers = Tied(), Gathers()
    source = LearnerSource(model, zero3=True, bucket_bytes=300, gather=gathers)
    source.metadata = lambda: [  # type: ignore[method-assign]  # ds_shape is DeepSpeed's
        compat.ParamMeta(n, p.dtype, tuple(p.shape))
        for n, p in model.named_parameters(remove_duplicate=False)
    ]
    buckets = []
    for bucket in source.buckets():
        assert {id(p) for p in dict(model.named_parameters()).values()} >= gathers.whole
        buckets.append([name for name, _ in bucket])
    assert buckets == [["embed.weight"], ["layer.weight", "layer.bias"], ["head.weight"]]
    assert len(gathers.log) == 3 and gathers.most <= 300
    assert [n for n, _ in source] == [n for b in buckets for n in b]


def test_without_zero3_nothing_is_gathered_and_every_tensor_is_the_parameter_itself() -> None:
    model = Tied()
    source = LearnerSource(model, zero3=False, bucket_bytes=10**9, gather=None)
    [bucket] = list(source.buckets())
    assert [n for n, _ in bucket] == ["embed.weight", "layer.weight", "layer.bias", "head.weight"]
    assert bucket[0][1].data_ptr() == model.embed.weight.data_ptr()  # no copy, no host


def _ray(*overrides: str) -> Any:
    return load_config([], ["env=math", *overrides]).ray


def test_the_backend_follows_where_the_learner_and_engines_are() -> None:
    assert transfer_backend(_ray()) == "agenthub-gloo"  # CPU machines and CI
    assert transfer_backend(_ray("ray.learner_num_gpus=0.5", "ray.worker_num_gpus=0.5")) == (
        "agenthub-gloo"
    )  # shares of GPUs that may or may not be one
    assert transfer_backend(_ray("ray.learner_num_gpus=1", "ray.worker_num_gpus=1")) == "nccl"
    colocated = _ray("ray.colocate=true")
    assert transfer_backend(colocated) == "ipc"
    assert (colocated.learner_num_gpus, colocated.worker_num_gpus) == (0.5, 0.5)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["ray.rollout_workers=2"], r"set both to 1, or ray.colocate=false"),
        (["ray.learner_ranks=2", "ray.learner_num_gpus=1"], r"set both to 1"),
        (["ray.learner_num_gpus=0.7", "ray.worker_num_gpus=0.5"], r"add up to at most 1"),
    ],
)
def test_a_colocation_one_gpu_cannot_hold_is_refused(overrides: list[str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        _ray("ray.colocate=true", *overrides)


def test_colocating_where_there_is_no_gpu_says_so_before_anything_starts() -> None:
    from agenthub import AgentHubError
    from agenthub.trainer._preflight import check_engine_gpus

    cfg = load_config([], ["env=math", "ray.colocate=true"])
    with pytest.raises(AgentHubError, match=r"has none: set ray.colocate=false"):
        check_engine_gpus(cfg, [0.0])
    with pytest.raises(AgentHubError, match=r"has 8 on a node.*CUDA_VISIBLE_DEVICES=0"):
        check_engine_gpus(cfg, [8.0])
    check_engine_gpus(cfg, [1.0])


class Client:
    """vLLM's trainer-side control plane, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.calls.append(("init", init_info))

    def start_weight_update(self) -> None:
        self.calls.append(("start", None))

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.calls.append(("update", update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.calls.append(("finish", None))


def test_an_nccl_round_broadcasts_beside_the_workers_receive_in_vllms_order() -> None:
    model, client, sent = Tied(), Client(), []
    source = LearnerSource(model, zero3=False, bucket_bytes=300)

    def broadcast(tensors: Iterator[tuple[str, Any]], group: Any, packing: dict[str, Any]) -> None:
        assert group == "group" and packing["packed_buffer_size_bytes"] == 300
        sent.extend(name for name, _ in tensors)

    rendezvous = {"master_address": "127.0.0.1", "master_port": 1234, "world_size": 2}
    sender = NcclSender.open(
        client,
        source,
        rendezvous,
        bucket_bytes=300,
        open_group=lambda address, port, world: "group",
        broadcast=broadcast,
    )
    [(what, init)] = client.calls
    assert what == "init" and init["rank_offset"] == 1 and init["world_size"] == 2
    assert ("packed" in init) == (compat.VERSION >= (0, 28))
    sender.send_weights()
    assert [c for c, _ in client.calls[1:]] == ["start", "update", "finish"]
    names = ["embed.weight", "layer.weight", "layer.bias", "head.weight"]
    assert client.calls[2][1]["names"] == names and sent == names
    sender.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        sender.send_weights()


def test_an_ipc_round_hands_each_bucket_over_and_holds_it_until_loaded() -> None:
    model, client = Tied(), Client()
    source = LearnerSource(model, zero3=False, bucket_bytes=300)
    shared: list[torch.Tensor] = []

    def share(tensor: torch.Tensor) -> tuple[Any, ...]:
        shared.append(tensor)
        return ("handle", len(shared) - 1)

    sender = IpcSender(client, source, uuid="GPU-x", share=share, synchronize=lambda: None)
    sender.send_weights()
    kinds = [c for c, _ in client.calls]
    assert kinds == ["start", "update", "update", "update", "finish"]
    updates = [info for c, info in client.calls if c == "update"]
    assert [u["names"] for u in updates] == [
        ["embed.weight"],
        ["layer.weight", "layer.bias"],
        ["head.weight"],
    ]
    assert updates[1]["ipc_handles"] == [{"GPU-x": ("handle", 1)}, {"GPU-x": ("handle", 2)}]
    assert updates[1]["dtype_names"] == ["float32", "float32"] and updates[1]["shapes"] == [
        [4, 4],
        [4],
    ]
    assert torch.equal(shared[0], model.embed.weight.detach())


def test_a_group_backend_places_each_engine_and_ipc_takes_no_rank() -> None:
    assert _placed({"world_size": 3, "master_port": 1}, 2)["rank_offset"] == 2
    assert _placed({}, 2) == {}


class Engine:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def sleep(self, level: int) -> None:
        self.log.append(f"sleep {level}")

    async def wake_up(self, tags: list[str] | None) -> None:
        self.log.append(f"wake {tags}")


def test_the_colocated_turn_reloads_the_weights_before_the_engine_takes_requests() -> None:
    log: list[str] = []

    async def step() -> float:
        log.append("step")
        return 0.5

    async def sync() -> None:
        log.append("sync")

    loss = asyncio.run(GpuTurns(Engine(log)).learner_turn(step, sync))
    assert loss == 0.5
    assert log == ["sleep 2", "step", "wake ['weights']", "sync", "wake ['kv_cache']"]


def test_a_failed_step_still_leaves_the_engine_awake_on_the_learners_weights() -> None:
    log: list[str] = []

    async def step() -> None:
        raise RuntimeError("out of memory")

    async def sync() -> None:
        log.append("sync")

    with pytest.raises(RuntimeError, match="out of memory"):
        asyncio.run(GpuTurns(Engine(log)).learner_turn(step, sync))
    assert log == ["sleep 2", "wake ['weights']", "sync", "wake ['kv_cache']"]
    with pytest.raises(ValueError, match="level 1 or 2"):
        GpuTurns(Engine(log), level=3)


def test_an_in_process_engine_takes_the_ipc_init_without_a_rank() -> None:
    class Recording:
        def __init__(self) -> None:
            self.got: list[dict[str, Any]] = []

        async def init_weight_transfer(self, info: dict[str, Any]) -> None:
            self.got.append(info)

    async def run() -> list[dict[str, Any]]:
        engine = Recording()
        loop = asyncio.get_running_loop()
        client = EngineClient(engine, loop)
        await asyncio.to_thread(client.init_weight_transfer_engine, {})
        await asyncio.to_thread(client.init_weight_transfer_engine, {"world_size": 2})
        return engine.got

    assert asyncio.run(run()) == [{}, {"world_size": 2, "rank_offset": 1}]


def test_a_step_asked_for_during_a_sync_waits_for_it_and_a_first_sync_wakes_nothing() -> None:
    log: list[str] = []

    async def run() -> None:
        turns = GpuTurns(Engine(log))
        synced = asyncio.Event()

        async def first_weights() -> None:
            log.append("sync 0")

        await turns.sync(first_weights)  # the run's first weights: the engine is awake
        assert log == ["sync 0"]

        async def step() -> None:
            log.append("step")

        async def slow_sync() -> None:
            log.append("sync 1 begins")
            await synced.wait()
            log.append("sync 1 ends")

        await turns.step(step)
        syncing = asyncio.create_task(turns.sync(slow_sync))
        await settle()
        queued = asyncio.create_task(turns.step(step))  # the loop queues the next step
        await settle()
        assert log[-1] == "sync 1 begins", "the engine must not sleep while taking weights"
        synced.set()
        await asyncio.gather(syncing, queued)

    asyncio.run(run())
    assert log == [
        "sync 0",
        "sleep 2",
        "step",
        "wake ['weights']",
        "sync 1 begins",
        "sync 1 ends",
        "wake ['kv_cache']",
        "sleep 2",
        "step",
        "wake ['weights']",
    ]


def test_the_cluster_puts_every_live_engine_to_sleep_and_wakes_it() -> None:
    from agenthub.trainer._cluster import _Engines

    log: list[tuple[int, str, Any]] = []

    class Method:
        def __init__(self, rank: int, name: str) -> None:
            self.rank, self.name = rank, name

        def remote(self, arg: Any) -> Any:
            async def call() -> None:
                log.append((self.rank, self.name, arg))

            return call()

    class Actor:
        def __init__(self, rank: int) -> None:
            self.sleep, self.wake_up = Method(rank, "sleep"), Method(rank, "wake_up")

    workers = {0: Actor(0)}
    engines = _Engines(lambda: workers)
    asyncio.run(engines.sleep(2))
    workers = {0: Actor(0), 1: Actor(1)}  # a replacement renews the dict
    asyncio.run(engines.wake_up(["weights"]))
    assert log == [(0, "sleep", 2), (0, "wake_up", ["weights"]), (1, "wake_up", ["weights"])]
