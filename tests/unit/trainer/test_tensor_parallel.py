"""`rollout.tensor_parallel_size`: each rollout engine split over several GPUs. What a machine
without GPUs can check: the setting's GPUs per worker, its refusal where the GPUs are not
there (before anything starts), the options vLLM is given, and that the weight-transfer group
counts and places every rank of every engine. The split engine itself needs GPUs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub import AgentHubError
from agenthub.trainer._config import ConfigError, TrainConfig, load_config
from agenthub.trainer._loop import Trainer
from agenthub.trainer._preflight import check_engine_gpus
from agenthub.trainer._weight_sync import WorkersClient, transfer_backend


def _config(*overrides: str) -> TrainConfig:
    return load_config([], ["env=math", *overrides])


def test_a_split_engine_holds_one_gpu_per_rank() -> None:
    assert _config().ray.worker_num_gpus == 0, "unsplit engines keep the default"
    split = _config("rollout.tensor_parallel_size=4")
    assert split.ray.worker_num_gpus == 4, "each rollout worker holds its engine's GPUs"
    given = _config("rollout.tensor_parallel_size=2", "ray.worker_num_gpus=2")
    assert given.ray.worker_num_gpus == 2
    # Whole GPUs on both sides: the weights go over NCCL.
    on_gpus = _config("rollout.tensor_parallel_size=2", "ray.learner_num_gpus=1")
    assert transfer_backend(on_gpus.ray) == "nccl"
    assert transfer_backend(split.ray) == "agenthub-gloo", "a learner on the CPU sends over gloo"
    for gpus in ("1", "0", "0.5", "8"):
        with pytest.raises(ConfigError, match=r"set ray.worker_num_gpus=4, or leave it out"):
            _config("rollout.tensor_parallel_size=4", f"ray.worker_num_gpus={gpus}")


def test_a_split_engine_is_refused_where_no_node_has_its_gpus() -> None:
    split = _config("rollout.tensor_parallel_size=4")
    check_engine_gpus(split, [2.0, 4.0])  # the largest node holds it
    check_engine_gpus(_config(), [])  # an unsplit engine runs anywhere, GPUs or none
    with pytest.raises(AgentHubError, match=r"the Ray cluster has at most 2 on a node: set "):
        check_engine_gpus(split, [2.0, 2.0])  # four GPUs in all, but the ranks share a node
    with pytest.raises(AgentHubError, match=r"the Ray cluster has no GPU .*tensor_parallel_size=1"):
        check_engine_gpus(split, [0.0])
    # Joining a cluster, its nodes are counted once the run has joined it.
    check_engine_gpus(_config("rollout.tensor_parallel_size=4", "ray.address=auto"))


def test_a_split_engine_this_machine_cannot_hold_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    import ray
    import torch

    # More GPUs than this machine has: 2 where it has none (the CPU refusal), else one more.
    gpus = torch.cuda.device_count()
    split = max(2, gpus + 1)
    said: list[str] = []
    with pytest.raises(AgentHubError) as refused:
        Trainer(
            _config(f"rollout.tensor_parallel_size={split}"), tmp_path / "run", log=said.append
        ).run()
    asked = (
        f"rollout.tensor_parallel_size={split} splits each rollout worker's vLLM engine over "
        f"{split} GPUs of one node"
    )
    assert str(refused.value) == asked + (
        ", and this machine has no GPU (vLLM's CPU build runs an engine as one process): set "
        "rollout.tensor_parallel_size=1, or train on GPUs (a machine with them, or a Ray "
        "cluster of GPU nodes joined with --ray-address)"
        if gpus == 0
        else f", and this machine has at most {gpus} on a node: set "
        f"rollout.tensor_parallel_size to at most {gpus}, or train where a node has {split}"
    )
    assert not (tmp_path / "run").exists() and not ray.is_initialized() and said == []


@dataclass(frozen=True)
class _Parallel:
    """The fields of vLLM's `ParallelConfig` that place an engine's worker in a transfer
    group: its tensor x pipeline parallel world, data-parallel replicas, and its own place."""

    world_size: int
    data_parallel_size: int = 1
    rank: int = 0
    data_parallel_index: int = 0


def _joined(offset: int, parallel: _Parallel) -> int:
    # The rank an engine worker takes in the trainer's group, as vLLM's NCCL backend
    # (`worker_init_process_group`) and agenthub's gloo one compute it.
    return offset + parallel.data_parallel_index * parallel.world_size + parallel.rank


def test_the_weight_transfer_counts_and_places_every_rank_of_every_engine() -> None:
    from agenthub.agents._vllm import _transfer_ranks

    # Three engines: split over 2 GPUs, 4 GPUs (2 tensor x 2 pipeline), and 2 replicas of 2.
    engines = [_Parallel(2), _Parallel(4), _Parallel(2, data_parallel_size=2)]
    ranks = [_transfer_ranks(e) for e in engines]
    assert ranks == [2, 4, 4]
    client = WorkersClient(["w0", "w1", "w2"], ranks)
    world = WorkersClient.world_size(ranks)
    assert world == 11 and client.offsets == [1, 3, 7]
    joined = [
        _joined(offset, _Parallel(e.world_size, e.data_parallel_size, rank, replica))
        for offset, e in zip(client.offsets, engines, strict=True)
        for replica in range(e.data_parallel_size)
        for rank in range(e.world_size)
    ]
    # The trainer is rank 0; every engine rank takes one of the others, none twice.
    assert sorted(joined) == list(range(1, world))


def test_the_engine_is_given_its_split_and_its_own_processes_for_it() -> None:
    from agenthub.agents._vllm import _engine_options

    def options(cpu: bool, split: int) -> dict[str, object]:
        return _engine_options(
            "model", cpu=cpu, max_model_len=None, dtype=None, seed=0, max_num_seqs=8,
            kv_cache_gib=None, enforce_eager=None, weight_transfer=None,
            tensor_parallel_size=split, ranks=split,
        )  # fmt: skip

    split = options(cpu=False, split=2)
    assert split["tensor_parallel_size"] == 2
    # Its ranks as the worker's own processes on the worker's GPUs: not Ray's executor,
    # which would ask Ray again for the GPUs the worker holds.
    assert split["distributed_executor_backend"] == "mp"
    whole = options(cpu=False, split=1)
    assert whole["tensor_parallel_size"] == 1 and "distributed_executor_backend" not in whole
