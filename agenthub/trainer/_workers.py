"""The Ray actors of a training run: rollout workers, the learner and the admission gate.

The classes here are plain Python; `agenthub.trainer._cluster` wraps them with `ray.remote` and
places them, so the same run works in one process tree or across a Ray cluster.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub._env import Env
from agenthub._registry import make
from agenthub._returns import checked_tasks
from agenthub._types import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    EvalConfig,
    EvalSummary,
    Trajectory,
    aevaluate,
)
from agenthub.agents._engines import rollout_config
from agenthub.agents._run_dir import split_tasks
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._library_logs import LIBRARY_LOG_ENV, route_library_logs
from agenthub.trainer._shipping import Shipment, own_vllm_logging
from agenthub.trainer._test_hooks import hold_in_sync

__all__ = [
    "Admission",
    "LearnerWorker",
    "RolloutWorker",
    "WorkerStats",
    "output_to_stderr",
    "task_stream",
]


def output_to_stderr() -> None:
    """Ray's set-up hook for the run's processes: what they print (an env's own prints) goes to
    stderr, as the driver's log lines do, so the run's stdout holds only its JSON summary;
    subprocesses started later inherit it. What the libraries log goes to the run's library
    log where the driver named one (`agenthub.trainer._library_logs`)."""
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    log = os.environ.get(LIBRARY_LOG_ENV)
    if log:
        route_library_logs(Path(log))


def task_stream(env: Env[Any], split: str, seed: int, rank: int, workers: int) -> Iterator[Task]:
    """The env's tasks for `split`, endlessly: each epoch in a new seeded order, each worker
    taking every `workers`-th task from `rank`. An endless source is read as it comes."""
    for epoch in itertools.count():
        tasks = checked_tasks(env.tasks(split))
        first = list(itertools.islice(tasks, 100_000))
        if len(first) < 100_000:
            random.Random(f"{seed}:{epoch}").shuffle(first)
            chunk: Iterator[Task] = iter(first)
        else:
            chunk = itertools.chain(first, tasks)
        yielded = False
        for task in itertools.islice(chunk, rank, None, workers):
            yielded = True
            yield task
        if not yielded:
            raise ValueError(
                f"env {env.spec.id if env.spec else env} has no {split!r} tasks for rollout "
                f"worker {rank} of {workers}"
            )


def _colocated_options(cfg: Any) -> dict[str, Any]:
    """vLLM's options for an engine that shares its GPU with the learner (`ray.colocate`):
    it can sleep, and takes its share of the GPU's memory, not vLLM's default 90%."""
    if not cfg.ray.colocate:
        return {}
    return {"enable_sleep_mode": True, "gpu_memory_utilization": 0.9 * cfg.ray.worker_num_gpus}


@dataclass(frozen=True)
class WorkerStats:
    """Where a rollout worker stands: training tasks drawn, tokens generated, and the policy
    version its engine holds."""

    tasks_drawn: int
    generated_tokens: int
    policy_version: int


class Admission:
    """Bounds how far rollouts run ahead of the learner (an async Ray actor).

    A group may start while `started - discarded < (version + max_staleness + 1) * batch`:
    with groups trained roughly in the order they start, a group started under policy
    version v is then trained by version v + max_staleness at the latest. Groups the learner
    discards (filtered, failed, too stale) give their place back. The hard bound is enforced
    again when batches are assembled, from the versions recorded on every token.

    Rollout workers that name themselves (`rank`, and `life`: how many workers held that rank
    before) are also followed one by one, for when one dies: the groups it had admitted but
    not yet queued, and how many tasks it had drawn up to its last admitted one.
    """

    def __init__(self, batch_groups: int, max_staleness: int, version: int = 0) -> None:
        self.batch = batch_groups
        self.max_staleness = max_staleness
        self.version = version
        self.started = version * batch_groups
        self.discarded = 0
        self.in_flight: dict[int, int] = {}
        self.drawn: dict[int, int] = {}
        self.lives: dict[int, int] = {}
        self._changed = asyncio.Condition()

    def _open(self) -> bool:
        return self.started - self.discarded < (
            (self.version + self.max_staleness + 1) * self.batch
        )

    async def acquire(self, rank: int | None = None, drawn: int = 0, life: int = 0) -> int:
        """Wait for room, take it; returns the policy version it was admitted under. `rank`'s
        worker had drawn `drawn` tasks, this group's among them. A call from a worker that has
        died since (an older `life`) takes no room."""
        async with self._changed:
            await self._changed.wait_for(self._open)
            if rank is not None:
                if life != self.lives.get(rank, 0):
                    return self.version
                self.in_flight[rank] = self.in_flight.get(rank, 0) + 1
                self.drawn[rank] = drawn
            self.started += 1
            return self.version

    def landed(self, rank: int, life: int = 0) -> None:
        """`rank`'s worker queued one of its groups."""
        if life == self.lives.get(rank, 0):
            self.in_flight[rank] -= 1

    async def forget(self, rank: int) -> tuple[int, int | None]:
        """`rank`'s worker died: the groups it had in flight never come, so their places go
        back. Returns how many, and the tasks it had drawn up to its last admitted one (None
        if it was admitted none), where its replacement (the next life) goes on from."""
        async with self._changed:
            lost = self.in_flight.pop(rank, 0)
            self.lives[rank] = self.lives.get(rank, 0) + 1
            self.discarded += lost
            self._changed.notify_all()
            return lost, self.drawn.pop(rank, None)

    def groups_in_flight(self) -> int:
        """Groups that named workers have admitted and not yet queued."""
        return sum(self.in_flight.values())

    async def set_version(self, version: int) -> None:
        """Admit rollouts for `version` (a version older than the gate's changes nothing)."""
        async with self._changed:
            self.version = max(self.version, version)
            self._changed.notify_all()

    async def hold(self, groups: int) -> None:
        """`groups` finished groups carried into the run (from a checkpoint) take places, as
        groups admitted now would; trained or discarded, they free them."""
        async with self._changed:
            self.started += groups

    async def discard(self, groups: int) -> None:
        async with self._changed:
            self.discarded += groups
            self._changed.notify_all()

    def stats(self) -> dict[str, int]:
        return {"started": self.started, "discarded": self.discarded, "version": self.version}


class RolloutWorker:
    """One inference engine and many episodes in flight (an async Ray actor).

    `run` plays training episodes forever, one group per admitted task, and pushes finished
    groups into the trajectory queue; the learner's weight sync loads new weights into its
    engine under a new policy version between generations; `evaluate` plays held-out tasks
    on the same engine.
    The worker holds one env instance open for its whole life, so resources that the env's
    instances share (the sandbox's warm pool) stay warm between steps.
    """

    def __init__(
        self,
        config: dict[str, Any],
        model: str | Shipment,
        rank: int,
        queue: Any,
        admission: Any,
        tasks_done: int = 0,
        life: int = 0,
    ) -> None:
        self.config = TrainConfig.model_validate(config)
        self.model = Shipment.of(model)
        """The policy's starting directory (of the driver's node: see `start`)."""
        self.rank = rank
        self.life = life
        """How many workers held this rank before (each replaced one that died)."""
        self.queue = queue
        self.admission = admission
        self.tasks_drawn = tasks_done
        self.generated_tokens = 0
        self.receiving = 0
        """The policy version of the last weight sync begun."""

    async def start(self) -> int:
        """Start the engine (inside the actor's event loop) and open the env; returns the
        engine's context length."""
        own_vllm_logging()  # before vLLM's import, which reads it
        from agenthub.agents import VLLMEngine
        from agenthub.trainer._weight_sync import transfer_backend

        cfg = self.config
        self.model_path = str(self.model.here())  # a node-local copy on another node
        self.chat = ChatTokenizer.from_pretrained(self.model_path)
        self.engine = VLLMEngine(
            self.model_path,
            weight_transfer=transfer_backend(cfg.ray),
            tensor_parallel_size=cfg.rollout.tensor_parallel_size,
            seed=cfg.run.seed + self.rank,
            max_num_seqs=max(cfg.rollout.concurrency, cfg.eval.tasks * cfg.eval.samples_per_task),
            output=os.environ.get(LIBRARY_LOG_ENV) or None,
            weight_update=cfg.rollout.weight_update,
            **_colocated_options(cfg),
        )
        self.keeper = make(cfg.env, **cfg.env_kwargs)
        self.rollout = rollout_config(
            cfg.rollout,
            samples=cfg.rollout.n_samples_per_prompt,
            concurrency=cfg.rollout.concurrency,
            seed=cfg.run.seed * 1000 + self.rank,
            sampling_seed=None,
        )
        self.runner = EpisodeRunner(
            self.engine, self.chat, cfg.env, self.rollout, env_kwargs=cfg.env_kwargs
        )
        return self.engine.max_model_len

    async def run(self) -> None:
        """Play training episodes until cancelled, pushing each finished group."""
        cfg = self.config
        stream = task_stream(self.keeper, "train", cfg.run.seed, self.rank, cfg.ray.rollout_workers)
        for _ in range(self.tasks_drawn):
            next(stream)

        def counted() -> Iterator[Task]:
            for task in stream:
                self.tasks_drawn += 1
                yield task

        async def push(group: list[Trajectory]) -> None:
            self.generated_tokens += sum(t.num_generated_tokens for t in group)
            await self.queue.put_batch([group])
            await self.admission.landed.remote(self.rank, self.life)

        async def admit() -> None:  # each task is drawn before it is admitted
            await self.admission.acquire.remote(self.rank, self.tasks_drawn, self.life)

        await self.runner.run(counted(), on_group=push, admission=admit)

    # The learner's weight sync (`WorkersClient`) drives the engine through these four.
    def weight_transfer_ranks(self) -> int:
        return self.engine.transfer_ranks

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        await self.engine.init_weight_transfer(init_info)

    async def start_weight_update(self, version: int) -> None:
        await self.engine.start_weight_update(version)
        self.receiving = version

    async def receive_weights(self, update_info: dict[str, Any]) -> None:
        await self.engine.receive_weights(update_info)
        await hold_in_sync(self.rank, self.life, self.receiving)  # a test's, else no-op

    async def finish_weight_update(self) -> None:
        await self.engine.finish_weight_update()

    async def sleep(self, level: int) -> None:
        """`ray.colocate`: free the GPU for the learner's turn (`GpuTurns`)."""
        await self.engine.sleep(level)

    async def wake_up(self, tags: list[str] | None) -> None:
        await self.engine.wake_up(tags)

    async def evaluate(
        self, tasks: int, split: str, temperature: float, samples: int
    ) -> EvalSummary:
        """The current policy's held-out figures (`agenthub.agents.evaluate`'s, an episode that
        ended in an error counting as 0) on the first `tasks` tasks of `split`, sampled as the
        training rollouts are but at `temperature` and seed 0: what `agenthub eval --seed 0`
        with the same settings measures. Rollouts go on meanwhile, so a weight sync can land in
        the middle of an evaluation: the summary gives the oldest and newest policy version
        that sampled its tokens (the engine's version when none was sampled)."""
        cfg = self.config
        settings = cfg.rollout.model_dump(
            include={
                "top_p", "max_reply_tokens", "stop", "max_turns", "max_tokens", "chat_template",
                "generate_timeout_s", "env_step_timeout_s",
            }
        )  # fmt: skip
        config = EvalConfig(
            env=cfg.env,
            env_kwargs=cfg.env_kwargs,
            split=split,
            num_tasks=tasks,
            samples_per_task=samples,
            temperature=temperature,
            seed=0,
            concurrency=max(1, tasks * samples),
            **settings,
        )
        selected = list(itertools.islice(checked_tasks(split_tasks(self.keeper, split)), tasks))
        version = self.engine.policy_version
        summary = await aevaluate(config, engine=self.engine, chat=self.chat, tasks=selected)
        return summary.model_copy(
            update={
                "policy_version": _or(summary.policy_version, version),
                "policy_version_max": _or(summary.policy_version_max, version),
            }
        )

    def stats(self) -> WorkerStats:
        return WorkerStats(self.tasks_drawn, self.generated_tokens, self.engine.policy_version)

    async def close(self) -> None:
        await self.keeper.aclose()
        await self.engine.aclose()


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


class LearnerWorker:
    """One rank of the DeepSpeed learner in its own process (a Ray actor).

    A learner of one rank starts at once. Of several (`ray.learner_ranks`), rank 0 opens the
    group's store (`rendezvous`), then every rank joins (`join`) and starts its learner; each
    call after that goes to every rank, rank 0's answer being the group's (`LearnerGroup`).
    A rank on another node than the driver's loads the model shipped from there, and returns
    what it saves for the run directory, packed, for the driver to write
    (`agenthub.trainer._shipping`)."""

    def __init__(
        self, config: dict[str, Any], model: str | Shipment, rank: int = 0, ranks: int = 1
    ) -> None:
        from transformers.utils import logging as transformers_logging

        # transformers' bars for loading and saving weights, each checkpoint's among them, come
        # out of an actor as lines of their own between the run's bar and its log.
        transformers_logging.disable_progress_bar()
        self.config = TrainConfig.model_validate(config)
        self.model = Shipment.of(model)
        self.model_path = str(self.model.here())
        self.rank, self.ranks = rank, ranks
        self.store: Any = None
        if ranks == 1:
            self._start()

    def _start(self) -> None:
        import torch

        from agenthub.trainer._learner import Learner

        torch.set_num_threads(self.config.ray.learner_threads)
        torch.manual_seed(self.config.run.seed)
        self.learner = Learner(self.model_path, self.config.learner)

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: open the group's store on this node; its address and port."""
        import ray

        from agenthub.trainer._ranks import open_store

        host = ray.util.get_node_ip_address()
        self.store, port = open_store(host, self.ranks)
        return host, port

    def join(self, host: str, port: int) -> None:
        """Join the group whose rank 0 listens at `host:port` (every rank at once; it returns
        when all have joined) and start this rank's learner."""
        from agenthub.trainer._ranks import join_group

        join_group(self.rank, self.ranks, host, port, self.store)
        self._start()

    def step(self, batch: Any) -> dict[str, float]:
        return self.learner.step(batch)

    def uses_bf16(self) -> bool:
        """Whether the learner trains in bf16 (`learner.bf16=null` decides by its device)."""
        return self.learner.bf16

    def state_dict(self) -> dict[str, Any]:
        """Rank 0: the policy's full weights on CPU (every rank gathers under ZeRO-3, and the
        others answer nothing)."""
        weights = self.learner.state_dict()
        return weights if self.rank == 0 else {}

    def open_weight_sync(self, workers: list[Any], ranks: list[int]) -> None:
        """Rank 0: open the weight-transfer group with the rollout workers' engines (again,
        with a new group, after one was replaced)."""
        from agenthub.trainer._weight_sync import open_sender, transfer_backend

        previous, client = getattr(self, "sender", None), getattr(self, "client", None)
        if client is not None:
            client.wait_ended()  # an engine must not end a round after it joins anew
        if previous is not None:
            previous.shutdown()
        self.sender, self.client = open_sender(
            self.learner.policy,
            self.learner.config.zero_stage == 3,
            transfer_backend(self.config.ray),
            workers,
            ranks,
        )

    def send_weights(self, version: int) -> float:
        """Broadcast the policy to every engine as `version` from rank 0; the other ranks
        take part in gathering it under ZeRO-3. Returns the seconds it took. Another rank
        under ZeRO-2 imports nothing of vLLM (seconds of CPU and memory in each rank)."""
        started = time.perf_counter()
        if self.rank == 0:
            self.client.version = version
            self.sender.send_weights()
        elif self.learner.config.zero_stage == 3:
            from agenthub.trainer._weight_sync import LearnerSource

            for _ in LearnerSource(self.learner.policy, zero3=True):
                pass
        return time.perf_counter() - started

    def save_checkpoint(self, directory: str, tag: str) -> bytes | None:
        """This rank's part of checkpoint `tag` in the driver's `directory`: written there on
        the driver's node, else returned packed."""
        return self.model.write_at_origin(
            directory, lambda at: self.learner.save_checkpoint(at, tag)
        )

    def save_model(self, directory: str, about: dict[str, Any] | None = None) -> bytes | None:
        """The policy exported as the driver's `directory` (as `save_checkpoint`)."""
        return self.model.write_at_origin(directory, lambda at: self.learner.save_model(at, about))

    def load_checkpoint(self, checkpoint: str | Shipment) -> int:
        """Load the checkpoint directory `checkpoint` (its tag is its name); the learner's
        steps it holds."""
        with Shipment.of(checkpoint).opened() as path:
            self.learner.load_checkpoint(path.parent, path.name)
        return self.learner.steps
