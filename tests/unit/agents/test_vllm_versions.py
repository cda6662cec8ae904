"""Each version branch of the vLLM seam (`_vllm_compat`) against that release's signatures.

The fakes below copy the signatures and dataclass fields of the vLLM release named beside
each (read from its source), not its behaviour: a call shaped for another release fails to
bind to them, as it would against the real one. The branch the installed vLLM takes runs
against the real thing in the integration tests (`tests/integration/agents/
test_weight_sync.py`) and, on a GPU, in `tests/gpu/`."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import pytest

pytest.importorskip("vllm", reason="the vLLM seam needs the train extra")

import torch

from agenthub.agents import _vllm_compat as compat
from agenthub.agents._vllm_compat import ParamMeta

ALL = [(0, minor) for minor in range(26, 33)]
META = [ParamMeta("a.weight", torch.bfloat16, (4, 2)), ParamMeta("b", torch.float32, (3,))]
PACKING = compat.nccl_packing(1024, 2)
RENDEZVOUS = {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 3}


# -- 0.26: the trainer engine takes its backend's config first; the factory takes the backend.


class TrainerEngine026:
    """vLLM 0.26's `TrainerWeightTransferEngine.__init__`."""

    def __init__(self, config: Any, *, client: Any, source: Any, is_sender: bool = True) -> None:
        self.config, self.client, self.source, self.is_sender = config, client, source, is_sender


class TrainerEngine027:
    """vLLM 0.27's (0.28 made `source` optional)."""

    def __init__(self, *, client: Any, source: Any, is_sender: bool = True) -> None:
        self.client, self.source, self.is_sender = client, source, is_sender


@pytest.mark.parametrize("version", ALL)
def test_agenthubs_trainer_engines_construct_on_every_series(version: tuple[int, int]) -> None:
    real = TrainerEngine026 if version < (0, 27) else TrainerEngine027
    base = compat.trainer_engine_base(real, version)
    engine = base(client="client", source="source")
    assert (engine.client, engine.source, engine.is_sender) == ("client", "source", True)
    if version < (0, 27):
        assert engine.config is None


class Factory026:
    """vLLM 0.26's `WeightTransferTrainerFactory`: its `trainer_init` takes the backend's
    name and config and calls the engine's `trainer_init(config=, init_info=, ...)`."""

    _registry: ClassVar[dict[str, Any]] = {}

    @classmethod
    def trainer_init(
        cls, backend: str, config: Any, init_info: Any, *, client: Any, source: Any
    ) -> Any:
        return cls._registry[backend]().trainer_init(
            config=config, init_info=init_info, client=client, source=source
        )


class Factory027:
    """vLLM 0.27's (0.28 made `source` optional): the init info names its backend."""

    _registry: ClassVar[dict[str, Any]] = {}

    @classmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any:
        return cls._registry[init_info.backend]().trainer_init(
            init_info, client=client, source=source
        )


class Engine:
    """An agenthub trainer engine: 0.27's `trainer_init` convention."""

    @classmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any:
        return ("opened", init_info.backend, client, source)


@dataclass
class Info:
    backend: str = "agenthub-gloo"


@pytest.mark.parametrize("version", ALL)
def test_the_trainer_engine_is_opened_through_each_series_factory(
    version: tuple[int, int],
) -> None:
    factory = Factory026 if version < (0, 27) else Factory027
    factory._registry = {"agenthub-gloo": lambda: Engine}
    opened = compat._trainer_init(factory, version, Info(), "client", "source")
    assert opened == ("opened", "agenthub-gloo", "client", "source")


def test_0_26s_factory_would_hand_the_engine_a_config_it_does_not_take() -> None:
    """Why the 0.26 branch goes past the factory: the fake is faithful enough to fail."""
    Factory026._registry = {"agenthub-gloo": lambda: Engine}
    with pytest.raises(TypeError):
        Factory026.trainer_init("agenthub-gloo", None, Info(), client="c", source="s")


# -- 0.28: the NCCL packing moved from the update info to the worker's init info.


@dataclass
class NCCLInitInfo026:
    """vLLM 0.26's `NCCLWeightTransferInitInfo` (`nccl_common`)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int


@dataclass
class NCCLInitInfo028(NCCLInitInfo026):
    """vLLM 0.28's, which 0.32 keeps."""

    packed: bool = False
    packed_buffer_size_bytes: int = 1 << 30
    packed_num_buffers: int = 2


@dataclass
class NCCLUpdateInfo026:
    """vLLM 0.26's `NCCLWeightTransferUpdateInfo` (0.27 keeps it)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    packed: bool = False
    packed_buffer_size_bytes: int = 1 << 30
    packed_num_buffers: int = 2


@dataclass
class NCCLUpdateInfo028:
    """vLLM 0.28's, which 0.32 keeps: the names, dtypes and shapes alone."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


@pytest.mark.parametrize("version", ALL)
def test_the_nccl_workers_are_told_the_packing_where_their_series_reads_it(
    version: tuple[int, int],
) -> None:
    new = version >= (0, 28)
    init = (NCCLInitInfo028 if new else NCCLInitInfo026)(
        **compat.nccl_worker_init_info(RENDEZVOUS, PACKING, version)
    )
    update = (NCCLUpdateInfo028 if new else NCCLUpdateInfo026)(
        **compat.nccl_update_info(META, PACKING, version)
    )
    told = init if new else update
    assert (told.packed, told.packed_buffer_size_bytes, told.packed_num_buffers) == (  # type: ignore[union-attr]
        True,
        1024,
        2,
    )
    assert update.names == ["a.weight", "b"]
    assert update.dtype_names == ["bfloat16", "float32"]
    assert update.shapes == [[4, 2], [3]]
    assert init.rank_offset == 1 and init.world_size == 3


# -- 0.32: the stateless group takes a timeout.


def stateless_group_026(
    host: str,
    port: int,
    rank: int,
    world_size: int,
    backend: str,
    group_name: str | None = None,
    return_store: bool = False,
    listen_socket: Any = None,
) -> None:
    """vLLM 0.26's `stateless_init_torch_distributed_process_group` (to 0.31)."""


def stateless_group_032(
    host: str,
    port: int,
    rank: int,
    world_size: int,
    backend: str,
    group_name: str | None = None,
    return_store: bool = False,
    listen_socket: Any = None,
    timeout: timedelta | None = None,
) -> None:
    """vLLM 0.32's."""


@pytest.mark.parametrize("version", ALL)
def test_the_group_timeout_is_passed_where_the_series_takes_one(version: tuple[int, int]) -> None:
    real = stateless_group_032 if version >= (0, 32) else stateless_group_026
    kwargs = compat._group_timeout(5.0, version)
    inspect.signature(real).bind("h", 1, 0, 2, backend="gloo", **kwargs)
    assert kwargs == ({"timeout": timedelta(seconds=5.0)} if version >= (0, 32) else {})


# -- the same in every series.


@dataclass
class IPCUpdateInfo026:
    """vLLM 0.26's `IPCWeightTransferUpdateInfo`."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    ipc_handles: list[dict[str, tuple[Any, ...]]] | dict[str, tuple[Any, ...]] | None = None
    ipc_handles_pickled: str | None = None
    tensor_sizes: list[int] | None = None
    packed: bool = False


@dataclass
class IPCUpdateInfo027:
    """vLLM 0.27's, which 0.32 keeps (packing told by a dict of handles, not a flag)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    ipc_handles: list[dict[str, tuple[Any, ...]]] | dict[str, tuple[Any, ...]] | None = None
    ipc_handles_pickled: str | None = None
    tensor_sizes: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize("real", [IPCUpdateInfo026, IPCUpdateInfo027])
def test_an_ipc_update_is_unpacked_in_every_series(real: type[Any]) -> None:
    handles = [{"GPU-0": ("a",)}, {"GPU-0": ("b",)}]
    info = real(**compat.ipc_update_info(META, handles))
    assert info.ipc_handles == handles and info.names == ["a.weight", "b"]
    assert getattr(info, "packed", False) is False


@pytest.mark.parametrize(
    ("found", "series"), [("0.26.0", (0, 26)), ("0.32.0+cpu", (0, 32)), ("0.29.1rc1", (0, 29))]
)
def test_a_version_string_names_its_series(found: str, series: tuple[int, int]) -> None:
    assert compat.release(found) == series


class AsyncLLM026:
    """vLLM 0.26's `AsyncLLM`, the methods agenthub calls whose signatures later releases
    changed or kept: 0.27 dropped `pause_generation`'s `wait_for_inflight_requests` and gave
    `finish_weight_update` a `weight_version`; `sleep` / `wake_up` are 0.32's too."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def pause_generation(
        self,
        *,
        mode: str = "abort",
        wait_for_inflight_requests: bool | None = None,
        clear_cache: bool = True,
    ) -> None:
        self.calls.append(("pause", {"mode": mode, "clear_cache": clear_cache}))

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.calls.append(("sleep", {"level": level, "mode": mode}))

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", {"tags": tags}))

    async def finish_weight_update(self) -> None:
        self.calls.append(("finish", {}))


class AsyncLLM032(AsyncLLM026):
    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        self.calls.append(("pause", {"mode": mode, "clear_cache": clear_cache}))

    async def wake_up(self, tags: list[str] | None = None) -> bool:  # type: ignore[override]
        self.calls.append(("wake_up", {"tags": tags}))
        return True

    async def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.calls.append(("finish", {}))


@pytest.mark.parametrize("llm_class", [AsyncLLM026, AsyncLLM032])
def test_sleep_wake_and_pause_are_called_alike_in_every_series(llm_class: type[Any]) -> None:
    import asyncio

    from agenthub.agents._update_gate import UpdateGate

    llm = llm_class()

    async def run() -> None:
        await UpdateGate(llm, "keep").begin()
        await compat.sleep(llm, 2)
        await compat.wake_up(llm, ["weights"])
        await llm.finish_weight_update()  # as VLLMEngine calls it: no version

    asyncio.run(run())
    assert llm.calls == [
        ("pause", {"mode": "keep", "clear_cache": False}),
        ("sleep", {"level": 2, "mode": "keep"}),
        ("wake_up", {"tags": ["weights"]}),
        ("finish", {}),
    ]
