"""What a run checks before it starts anything: that its env builds and gives the tasks it will
read, and that its engines fit the GPUs there are, in the driver, where a mistake fails in a
second with its own message."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from agenthub._errors import AgentHubError
from agenthub.trainer._config import TrainConfig

__all__ = ["check_engine_gpus", "check_env", "ray_node_gpus", "stdout_to_stderr"]


async def check_env(cfg: TrainConfig) -> None:
    """Build the env and read through each split as far as the run reads it (the first 10,000
    training tasks, the `eval.tasks` held-out ones), here in the driver: a wrong id, argument or
    a bad line in a task file then fails in a second with its own message, before Ray starts or
    anything is written, instead of as a traceback from inside a rollout worker, perhaps an hour
    in (held-out evaluation reading the bad line). What the env prints meanwhile goes to
    stderr, as it does from the run's other processes: stdout is the summary's."""
    from agenthub._errors import EnvArgumentsError
    from agenthub._registry import make
    from agenthub._returns import READ_AHEAD, READ_AHEAD_S, read_ahead
    from agenthub._tracebacks import raised

    readers = {"train": ("training", READ_AHEAD)}
    if cfg.eval.every:
        reader = f"held-out evaluation (eval.every={cfg.eval.every})"
        readers.setdefault(cfg.eval.split, (reader, cfg.eval.tasks))
    with stdout_to_stderr():
        try:
            env = make(cfg.env, **cfg.env_kwargs)
        except EnvArgumentsError as exc:
            raise AgentHubError(f"{exc}; the run gives them as env_kwargs.NAME=VALUE") from exc
        try:
            for split, (reader, limit) in readers.items():
                try:
                    if read_ahead(env.tasks(split), READ_AHEAD_S, limit) == 0:
                        raise AgentHubError(f"environment {cfg.env!r} gives no {split!r} tasks")
                except Exception as exc:
                    hint = "" if split == "train" else "; or set eval.every=0"
                    what = str(exc).rstrip(".")
                    if not isinstance(exc, AgentHubError | ValueError | OSError):
                        # the env's own bug: say what it raised, and where
                        what = raised(f"the env's tasks({split!r})", exc)
                    message = f"{reader} reads split {split!r}: {what}{hint}"
                    raise AgentHubError(message) from exc
        finally:
            await env.aclose()


def check_engine_gpus(cfg: TrainConfig, node_gpus: Sequence[float] | None = None) -> None:
    """Refuse a rollout engine split over more GPUs (`rollout.tensor_parallel_size`) than one
    node has: the engine's ranks are processes of one rollout worker. `node_gpus` are the GPUs
    of each node of the Ray cluster the run joined (`ray_node_gpus`); None, before Ray starts,
    this machine's, unless the run will join a cluster (`ray.address`), whose nodes are known
    only once it has."""
    _check_colocate(cfg, node_gpus)
    split = cfg.rollout.tensor_parallel_size
    if split == 1:
        return
    where = "the Ray cluster"
    if node_gpus is None:
        if cfg.ray.address is not None:
            return
        node_gpus, where = [_local_gpus()], "this machine"
    most = int(max(node_gpus, default=0.0))
    asked = (
        f"rollout.tensor_parallel_size={split} splits each rollout worker's vLLM engine over "
        f"{split} GPUs of one node"
    )
    if most == 0:
        raise AgentHubError(
            f"{asked}, and {where} has no GPU (vLLM's CPU build runs an engine as one process): "
            "set rollout.tensor_parallel_size=1, or train on GPUs (a machine with them, or a "
            "Ray cluster of GPU nodes joined with --ray-address)"
        )
    if split > most:
        raise AgentHubError(
            f"{asked}, and {where} has at most {most} on a node: set "
            f"rollout.tensor_parallel_size to at most {most}, or train where a node has {split}"
        )


def _check_colocate(cfg: TrainConfig, node_gpus: Sequence[float] | None) -> None:
    """`ray.colocate` shares a GPU: said before start-up where there is none."""
    if not cfg.ray.colocate:
        return
    where = "the Ray cluster"
    if node_gpus is None:
        if cfg.ray.address is not None:
            return
        node_gpus, where = [_local_gpus()], "this machine"
    most = max(node_gpus, default=0.0)
    if most < 1:
        raise AgentHubError(
            f"ray.colocate=true shares a CUDA GPU between the learner and the rollout engine "
            f"(vLLM's sleep mode and CUDA IPC), and {where} has none: set ray.colocate=false "
            "to train on CPU, or train on a machine with a GPU"
        )
    if most > 1:
        # Ray places each of the two on any GPU of the node; CUDA IPC needs them on one.
        raise AgentHubError(
            f"ray.colocate=true puts the learner and the rollout engine on one GPU, and "
            f"{where} has {most:g} on a node, where Ray may place the two on different ones: "
            "make one visible (CUDA_VISIBLE_DEVICES=0 agenthub train ...), or set "
            "ray.colocate=false and give each its own (ray.learner_num_gpus=1, "
            "ray.worker_num_gpus=1)"
        )


def _local_gpus() -> int:
    """The GPUs torch sees here, which Ray started on this machine sees too (none where torch
    is vLLM's CPU build)."""
    import torch

    return int(torch.cuda.device_count())


def ray_node_gpus() -> list[float]:
    """The GPUs of each live node of the Ray cluster this process joined."""
    import ray

    nodes = ray.nodes()
    return [float(n["Resources"].get("GPU", 0.0)) for n in nodes if n["Alive"]]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Inside, what is printed to stdout goes to stderr: Python's prints and, through the file
    descriptor, those of subprocesses and native code."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptors 1 and 2 to speak of (a daemon): Python's alone
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)
