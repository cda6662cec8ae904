"""A training cluster whose engines and learner only sleep, for measuring the orchestration.

`SimCluster` is the real `RayCluster` (Ray actors, the bounded `TrajectoryQueue`, the
`Admission` gate) with its rollout worker and learner actors replaced by `SimRolloutWorker`
and `SimLearner`: the same remote methods, but every generation, env step, learner step and
weight transfer is a sleep whose length follows a `SimModel`. The `Trainer`, batch assembly,
triage, the weight publisher and vLLM's weight-sync control plane (`WorkersClient`) run
unchanged, so what the figures show beyond the model is what agenthub's orchestration costs.
`benchmarks/cluster_sim.py` sweeps it; nothing in a real run imports this module.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agenthub._env import Env
from agenthub._errors import AgentHubError
from agenthub._types import Step, Task
from agenthub.agents import EpisodeRunner, Timings, Trajectory
from agenthub.agents._engines import rollout_config
from agenthub.trainer._cluster import RayCluster
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._shipping import Shipment
from agenthub.trainer._workers import WorkerStats

__all__ = ["SimCluster", "SimLearner", "SimModel", "SimRolloutWorker", "SimTasks"]


@dataclass(frozen=True)
class SimModel:
    """The times the simulation sleeps, in the model's seconds (a real cluster's); each sleep
    lasts `time_scale` times as long as the model says, so a sweep fits a few minutes.

    An episode is `turns` turns of a `reply_tokens` reply decoded at `decode_tokens_per_s`
    per sequence (an engine decodes `rollout.concurrency` sequences at once: that many
    episodes hold a slot each, as `EpisodeRunner` runs them) and an env step of lognormal
    latency (mean `env_mean_s`, log-space deviation `env_sigma`: a heavy tail). A learner step
    takes `learner_s_per_token` per token of its batch; a weight sync `sync_s_per_byte` per
    byte of `param_bytes`. The engines treat their generations in flight as the run's
    `rollout.weight_update` says: `drain` lets them finish first; `keep` pauses them for the
    transfer, then each engine recomputes their KV on the new weights at
    `prefill_tokens_per_s` (half a trajectory's tokens each, on average) before they go on.
    """

    decode_tokens_per_s: float = 64.0
    turns: int = 4
    prompt_tokens: int = 512
    reply_tokens: int = 256
    observation_tokens: int = 64
    env_mean_s: float = 2.0
    env_sigma: float = 1.0
    learner_s_per_token: float = 96e-6
    param_bytes: float = 14e9
    sync_s_per_byte: float = 0.1e-9
    prefill_tokens_per_s: float = 32_000.0
    time_scale: float = 1 / 40

    @property
    def generate_s(self) -> float:
        return self.reply_tokens / self.decode_tokens_per_s

    @property
    def episode_s(self) -> float:
        """An episode's mean length."""
        return self.turns * (self.generate_s + self.env_mean_s)

    @property
    def trajectory_tokens(self) -> int:
        turns = self.turns
        return (
            self.prompt_tokens + turns * self.reply_tokens + (turns - 1) * self.observation_tokens
        )

    @property
    def sync_s(self) -> float:
        return self.param_bytes * self.sync_s_per_byte

    def learn_s(self, tokens: int) -> float:
        return tokens * self.learner_s_per_token

    def rollout_capacity(self, workers: int, concurrency: int) -> float:
        """Trajectories per model second that `workers` engines finish with every slot busy."""
        return workers * concurrency / self.episode_s

    def learner_capacity(self, batch_trajectories: int) -> float:
        """Trajectories per model second the learner trains, a step and a sync at a time."""
        step_s = self.learn_s(batch_trajectories * self.trajectory_tokens) + self.sync_s
        return batch_trajectories / step_s

    def env_latency_s(self, rng: random.Random) -> float:
        mu = math.log(self.env_mean_s) - self.env_sigma**2 / 2
        return rng.lognormvariate(mu, self.env_sigma)

    def sleep_s(self, model_s: float) -> float:
        return model_s * self.time_scale

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> SimModel:
        return cls(**json.loads(Path(path).read_text()))


class SimTasks(Env[str]):
    """The simulated run's env as the driver checks it: endless tasks; the simulated rollout
    workers play them without it."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        i = 0
        while True:
            yield Task(id=f"{split}-{i}", prompt="")
            i += 1

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    async def step(self, action: str) -> Step[str]:
        return Step("", 0.0, terminated=True)


class _SimEngine:
    """Generation as a sleep, with `VLLMEngine`'s weight-update gate: a round holds new
    requests back, and lets those in flight finish on the old weights (`keep=False`) or
    pauses them where they are until the round ends and their KV is recomputed (`keep`)."""

    def __init__(self, model: SimModel, keep: bool) -> None:
        self.model = model
        self.keep = keep
        self.policy_version = 0
        self._gate = asyncio.Condition()
        self._in_flight = 0
        self._syncing = False
        self._incoming = 0
        self._pause, self._resumed = asyncio.Event(), asyncio.Event()
        self._resumed.set()
        self._recompute_s = 0.0
        """How long the requests in flight at the last round's end waited for their KV."""

    async def generate(self) -> int:
        """Decode one reply; the policy version that sampled its first token."""
        async with self._gate:
            await self._gate.wait_for(lambda: not self._syncing)
            self._in_flight += 1
        try:
            version = self.policy_version
            await self._decode(self.model.sleep_s(self.model.generate_s))
            return version
        finally:
            async with self._gate:
                self._in_flight -= 1
                self._gate.notify_all()

    async def _decode(self, left: float) -> None:
        """Sleep `left` seconds of decoding, stopped while a `keep` round pauses it."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await asyncio.wait_for(self._pause.wait(), timeout=left)
            except TimeoutError:
                return
            left -= loop.time() - began
            await self._resumed.wait()
            await asyncio.sleep(self._recompute_s)

    async def start_update(self, version: int) -> None:
        async with self._gate:
            self._syncing = True
            if self.keep:
                self._resumed.clear()
                self._pause.set()
            else:
                await self._gate.wait_for(lambda: self._in_flight == 0)
        self._incoming = version

    async def finish_update(self) -> None:
        async with self._gate:
            self.policy_version = self._incoming
            self._syncing = False
            context = self._in_flight * self.model.trajectory_tokens / 2
            self._recompute_s = self.model.sleep_s(context / self.model.prefill_tokens_per_s)
            self._pause.clear()
            self._resumed.set()
            self._gate.notify_all()


class _SimRunner(EpisodeRunner):
    """`EpisodeRunner.run`'s scheduling (slots, groups, admission) over simulated episodes."""

    def __init__(self, engine: _SimEngine, cfg: TrainConfig, rank: int) -> None:
        # Only `run`'s scheduling is kept: no chat template, env or sampling to set up.
        self.config = rollout_config(
            cfg.rollout,
            samples=cfg.rollout.n_samples_per_prompt,
            concurrency=cfg.rollout.concurrency,
            seed=cfg.run.seed * 1000 + rank,
            sampling_seed=None,
        )
        self.sim = engine
        self.rng = random.Random(cfg.run.seed * 1000 + rank)

    async def run_episode(self, task: Task, *, sample: int = 0) -> Trajectory:
        model, engine = self.sim.model, self.sim
        tokens, mask, versions = _part(model.prompt_tokens, 0, engine.policy_version)
        started = time.perf_counter()
        for turn in range(model.turns):
            seen = [_part(model.reply_tokens, 1, await engine.generate())]
            await asyncio.sleep(model.sleep_s(model.env_latency_s(self.rng)))
            if turn < model.turns - 1:
                seen.append(_part(model.observation_tokens, 0, engine.policy_version))
            for t, m, v in seen:
                tokens, mask, versions = tokens + t, mask + m, versions + v
        reward = float(self.rng.random() < 0.5)
        return Trajectory(
            env="cluster-sim",
            task_id=task.id,
            sample=sample,
            tokens=tokens,
            loss_mask=mask,
            logprobs=[-1.0 * m for m in mask],
            policy_versions=versions,
            step_rewards=[0.0] * (model.turns - 1) + [reward],
            reward=reward,
            terminated=True,
            truncated=False,
            num_turns=model.turns,
            timings=Timings(total_s=time.perf_counter() - started),
        )


def _part(n: int, trained: int, version: int) -> tuple[list[int], list[int], list[int]]:
    return [1] * n, [trained] * n, [version] * n


class SimRolloutWorker:
    """`RolloutWorker`'s remote methods over a simulated engine (an async Ray actor):
    `run` plays training episodes until cancelled, one group per admitted task, and pushes
    each finished group into the trajectory queue."""

    def __init__(
        self,
        config: dict[str, Any],
        model_path: str | Shipment,
        rank: int,
        queue: Any,
        admission: Any,
        tasks_done: int = 0,
        life: int = 0,
    ) -> None:
        self.config = TrainConfig.model_validate(config)
        self.model = SimModel.load(Shipment.of(model_path).here())
        self.rank = rank
        self.life = life
        """How many workers held this rank before (each replaced one that died)."""
        self.queue = queue
        self.admission = admission
        self.tasks_drawn = tasks_done
        self.generated_tokens = 0
        self.engine = _SimEngine(self.model, keep=self.config.rollout.weight_update == "keep")

    async def start(self) -> int:
        return self.model.trajectory_tokens

    async def run(self) -> None:
        def tasks() -> Iterator[Task]:
            while True:
                self.tasks_drawn += 1
                yield Task(id=f"{self.rank}-{self.tasks_drawn}", prompt="")

        async def push(group: list[Trajectory]) -> None:
            self.generated_tokens += sum(t.num_generated_tokens for t in group)
            await self.queue.put_batch([group])

        async def admit() -> None:
            await self.admission.acquire.remote()

        runner = _SimRunner(self.engine, self.config, self.rank)
        await runner.run(tasks(), on_group=push, admission=admit)

    def weight_transfer_ranks(self) -> int:
        return 1

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        pass

    async def start_weight_update(self, version: int) -> None:
        await self.engine.start_update(version)

    async def receive_weights(self, update_info: dict[str, Any]) -> None:
        await asyncio.sleep(self.model.sleep_s(self.model.sync_s))

    async def finish_weight_update(self) -> None:
        await self.engine.finish_update()

    async def evaluate(self, tasks: int, split: str, temperature: float, samples: int) -> Any:
        raise AgentHubError("the cluster simulation has no held-out evaluation; set eval.every=0")

    def stats(self) -> WorkerStats:
        return WorkerStats(self.tasks_drawn, self.generated_tokens, self.engine.policy_version)

    async def close(self) -> None:
        pass


class SimLearner:
    """`LearnerWorker`'s remote methods (a Ray actor, one call at a time): a step sleeps for
    its batch's tokens, a weight sync drives the engines through vLLM's control plane
    (`WorkersClient`) and sleeps for the transfer. Keeps when it was busy (`busy`)."""

    def __init__(self, config: dict[str, Any], model_path: str | Shipment) -> None:
        self.model = SimModel.load(Shipment.of(model_path).here())
        self.steps = 0
        self.intervals: list[tuple[float, float]] = []
        self.modelled: list[tuple[float, float]] = []
        """Each learner step's and transfer's start and end had it lasted just what the model
        says (the sleep asked for, without the machine's lateness or the engines' answers)."""
        self.waits: dict[str, list[tuple[float, float]]] = {"start": [], "finish": []}
        self.sent: list[tuple[int, int]] = []
        """Each sync's policy version and the learner steps taken when it sent them."""

    def step(self, batch: Any) -> dict[str, float]:
        tokens = int(batch.attention_mask.sum())
        self._busy(self.model.learn_s(tokens))
        self.steps += 1
        return {"loss": 0.0, "tokens": float(tokens)}

    def uses_bf16(self) -> bool:
        return False

    def open_weight_sync(self, workers: Sequence[Any], ranks: Sequence[int]) -> None:
        from agenthub.trainer._weight_sync import WorkersClient

        previous = getattr(self, "client", None)
        if previous is not None:
            previous.wait_ended()
        self.client = WorkersClient(workers, ranks)
        self.client.init_weight_transfer_engine({})

    def send_weights(self, version: int) -> float:
        started = time.perf_counter()
        self.sent.append((version, self.steps))
        self.client.version = version
        start = time.monotonic()
        self.client.start_weight_update()  # `drain`: the engines let generations finish
        transfer = time.monotonic()
        self.waits["start"].append((start, transfer))
        self.modelled.append((transfer, transfer + self.model.sleep_s(self.model.sync_s)))
        self.client.update_weights({})  # the engines sleep for the transfer, as it takes
        finish = time.monotonic()
        self.intervals.append((transfer, finish))
        self.client.finish_weight_update()
        self.waits["finish"].append((finish, time.monotonic()))
        return time.perf_counter() - started

    def _busy(self, model_s: float) -> None:
        began = time.monotonic()
        self.modelled.append((began, began + self.model.sleep_s(model_s)))
        time.sleep(self.model.sleep_s(model_s))
        self.intervals.append((began, time.monotonic()))

    def busy(self) -> list[tuple[float, float]]:
        """When the learner computed or sent weights (`time.monotonic`, the machine's clock)."""
        return list(self.intervals)

    def busy_modelled(self) -> list[tuple[float, float]]:
        """When the learner would have computed or sent weights, each for just the model's
        time (the rest of `busy` is the machine's and the engines' answers)."""
        return list(self.modelled)

    def versions_sent(self) -> list[tuple[int, int]]:
        """Each sync's policy version and the learner steps taken when it sent them."""
        return list(self.sent)

    def waited(self) -> dict[str, list[tuple[float, float]]]:
        """When the learner, sending weights, waited for every engine to start the round
        (`start`: to pause its generations, or to let them finish) and to end it (`finish`)."""
        return self.waits

    def save_checkpoint(self, directory: str, tag: str) -> None:
        _write(Path(directory) / tag / "steps", str(self.steps))

    def save_model(self, directory: str, about: dict[str, Any] | None = None) -> None:
        from agenthub.trainer._learner import MODEL_CHECKPOINT

        _write(Path(directory) / MODEL_CHECKPOINT, json.dumps(about or {}))

    def load_checkpoint(self, checkpoint: str | Shipment) -> int:
        self.steps = int((Shipment.of(checkpoint).here() / "steps").read_text())
        return self.steps


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class SimCluster(RayCluster):
    """`RayCluster` with the simulated actors; the model is the JSON file at `model_path`.
    Keeps the learner's busy intervals, those it waited for the engines to start and end a
    weight sync, what each sync sent, and its busy intervals as long as the model says, when
    it closes (`learner_busy`, `learner_waited`, `learner_sent`, `learner_modelled`)."""

    def __init__(
        self,
        cfg: TrainConfig,
        model_path: Path,
        version: int,
        tasks_drawn: list[int],
        *,
        rollout_worker: type[SimRolloutWorker] = SimRolloutWorker,
    ) -> None:
        super().__init__(
            cfg,
            model_path,
            version,
            tasks_drawn,
            rollout_worker=rollout_worker,
            learner=SimLearner,
        )
        self.learner_busy: list[tuple[float, float]] = []
        self.learner_waited: dict[str, list[tuple[float, float]]] = {}
        self.learner_sent: list[tuple[int, int]] = []
        self.learner_modelled: list[tuple[float, float]] = []

    async def aclose(self) -> None:
        try:
            self.learner_busy = await self.learner.first.busy.remote()
            self.learner_waited = await self.learner.first.waited.remote()
            self.learner_sent = await self.learner.first.versions_sent.remote()
            self.learner_modelled = await self.learner.first.busy_modelled.remote()
        finally:
            await super().aclose()
