"""The run's processes: Ray, the rollout workers, the learner, the admission gate and the queue
between them, behind the few calls the driver makes (`Cluster`).

`RayCluster` is the real one. Unit tests give the driver's parts an in-memory cluster instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agenthub._errors import AgentHubError
from agenthub.agents import Trajectory
from agenthub.agents._run_dir import write_atomic
from agenthub.trainer._colocate import GpuTurns
from agenthub.trainer._config import HeldOutConfig, TrainConfig
from agenthub.trainer._library_logs import library_log_env, route_library_logs

if TYPE_CHECKING:
    from agenthub.agents._eval_summary import EvalSummary
    from agenthub.trainer._batch import TrainBatch
    from agenthub.trainer._workers import WorkerStats

__all__ = ["Cluster", "ClusterNews", "Lost", "RayCluster", "Replaced", "start_ray"]

_OUTPUT_TO_STDERR = "agenthub.trainer._workers.output_to_stderr"
"""Ray's set-up hook for every process of the run (a name: Ray imports it there)."""


_PING_S = 30.0
"""How long a process of the run may take to answer whether it lives (a busy learner answers
after its step)."""


@dataclass(frozen=True)
class Lost:
    """The run's processes found dead, with the error that says so: the learner's, and each
    rollout worker's by rank."""

    learner: BaseException | None = None
    workers: dict[int, BaseException] = field(default_factory=dict)


class ClusterNews(Exception):
    """Not an error: what `check_workers` raises for the recovery to act on between two steps,
    as it acts on a dead worker: a given-up rank's new worker found room (`take_back`)."""


@dataclass(frozen=True)
class Replaced:
    """What replacing dead rollout workers came to: the episodes the dead ones had in flight
    (lost), the ranks whose new worker found no room in the Ray cluster in time (given up: the
    run goes on without them), and the rollout workers the run has now."""

    episodes_lost: int
    given_up: list[int]
    workers: int


class Cluster(Protocol):
    """What the driver asks of the run's processes."""

    async def start(self) -> None:
        """Start every rollout worker's engine and env; one that finds no room in the cluster
        within `run.worker_placement_timeout_s` is given up (`given_up`)."""
        ...

    def given_up(self) -> list[int]:
        """The ranks with no worker: given up at the start, or when their worker died."""
        ...

    async def open_weight_sync(self) -> bool:
        """Join the engines to the learner; whether the learner trains in bf16."""
        ...

    def run_workers(self) -> None:
        """Set the rollout workers playing training episodes."""
        ...

    def stop_workers(self) -> None: ...

    async def aclose(self) -> None:
        """End every process of the run (the workers' engines and envs closed first)."""
        ...

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        """Up to `most` finished groups; `TimeoutError` when none came within `timeout_s`."""
        ...

    async def give_back(self, groups: int) -> None:
        """Return the places of `groups` discarded groups to the admission gate."""
        ...

    def check_workers(self) -> None:
        """Raise the error of a rollout worker that stopped; else `ClusterNews` when the
        recovery has something to take in (`room_again`)."""
        ...

    def queue_depth(self) -> int: ...

    async def queued(self) -> list[list[Trajectory]]:
        """The finished groups in the queue now, oldest first, left there (for a
        checkpoint). They belong to the queue, on the driver's node: a rollout worker that
        dies, or its node, takes none of them."""
        ...

    async def hold_places(self, groups: int) -> None:
        """Give `groups` finished groups carried into this session (from a checkpoint, or
        across a learner restart) their places in the admission gate, as if admitted now:
        trained or discarded, they free them as any group does."""
        ...

    async def learn(self, batch: TrainBatch) -> dict[str, float]:
        """One learner step on `batch`; the learner's metrics. The learner runs the calls
        made of it (`learn`, `send_weights`, checkpoints) one at a time, in the order they
        were made, each made before the coroutine first waits: a `learn` whose task starts
        after a `send_weights` task runs after that sync."""
        ...

    async def send_weights(self, version: int) -> float:
        """Send the learner's weights to every engine as `version`; the seconds the transfer
        took. Rollouts are not admitted for it yet (`admit_version`)."""
        ...

    async def admit_version(self, version: int) -> None:
        """Admit rollouts for policy `version`, once every engine has received it (an
        engine still ending the round holds new requests until it serves `version`)."""
        ...

    async def worker_stats(self) -> list[WorkerStats | None]:
        """Each rollout worker's stats, None for one that died."""
        ...

    async def evaluate(self, cfg: HeldOutConfig) -> EvalSummary:
        """A held-out evaluation on the first rollout worker's engine."""
        ...

    async def save_checkpoint(self, directory: Path, tag: str) -> None: ...

    async def save_model(self, directory: Path, about: dict[str, Any]) -> None: ...

    async def load_checkpoint(self, directory: Path, tag: str) -> int:
        """Load the learner's checkpoint `tag`; the learner steps it holds."""
        ...

    async def lost(self) -> Lost:
        """Which of the run's processes have died."""
        ...

    async def replace_workers(self, ranks: list[int], version: int) -> Replaced:
        """Start a new rollout worker in place of each dead one of `ranks`, going on from the
        tasks its predecessor had drawn, with the weights of policy `version`, and set it
        playing. One that finds no room in the cluster within `run.worker_placement_timeout_s`
        is given up: the admission gate, the weight sync and the episodes in flight then count
        the workers left."""
        ...

    async def episodes_in_flight(self) -> int:
        """Episodes admitted and still playing (not yet queued)."""
        ...

    def room_again(self) -> bool:
        """Whether a new worker for a rank given up has found room in the cluster and is
        started, to be taken back (`take_back`). While a rank is given up, looks for room in
        the background, one try of `run.worker_placement_timeout_s` after another."""
        ...

    async def take_back(self, version: int) -> list[int]:
        """Take back the given-up ranks whose new worker found room: every engine joins a new
        weight-transfer group with the learner and gets the weights of `version`, and the new
        workers play from their rank's place in the task stream. The ranks taken back."""
        ...


class RayCluster:
    """The run's Ray actors: `rollout_workers` workers, the learner, the admission gate and the
    bounded trajectory queue. `start()` starts the engines, `open_weight_sync()` joins them to
    the learner, `run_workers()` sets rollouts going, `aclose()` ends every actor.
    `rollout_worker` and `learner` replace the actor classes (`RolloutWorker`, `LearnerWorker`)
    with others of the same methods: the cluster simulation's (`agenthub.trainer._sim`).
    With `processes`, the process ids of the learner and each rollout worker are written to
    that JSON file whenever they change (for an operator's `kill`, or a chaos test's)."""

    def __init__(
        self,
        cfg: TrainConfig,
        model_path: Path,
        version: int,
        tasks_drawn: list[int],
        *,
        rollout_worker: type | None = None,
        learner: type | None = None,
        processes: Path | None = None,
    ) -> None:
        from agenthub.trainer._learner_group import LearnerGroup, check_custom
        from agenthub.trainer._queue import TrajectoryQueue
        from agenthub.trainer._shipping import ship
        from agenthub.trainer._workers import Admission, RolloutWorker

        self.cfg = cfg
        self.processes = processes
        config = cfg.model_dump(mode="json")
        self._worker_class = rollout_worker or RolloutWorker
        workers, wanted = cfg.ray.rollout_workers, cfg.ray.worker_resources
        check_custom(f"{workers} rollout worker(s)", workers, wanted, "ray.worker_resources")
        model = ship(model_path)  # once, for every process on another node than this one
        self._worker_args = (config, model)
        self._drawn = list(tasks_drawn)
        """Where each rank's worker started in its task stream."""
        groups, staleness = cfg.algorithm.batch_groups, cfg.algorithm.max_staleness
        # The gate and the queue live with the driver: the run outlives any other node.
        here = {"num_cpus": 0, "scheduling_strategy": _this_node()}
        self.queue: TrajectoryQueue[list[Trajectory]] = TrajectoryQueue(
            (staleness + 2) * groups, actor_options=here
        )
        self.admission = _actor(Admission, max_concurrency=10_000, **here).remote(
            groups, staleness, version
        )
        self.learner = LearnerGroup(cfg, model, learner)
        self.workers: dict[int, Any] = {
            rank: self._new_worker(rank, tasks_drawn[rank], 0)
            for rank in range(cfg.ray.rollout_workers)
        }
        """The live rollout workers by rank (a rank given up has none)."""
        self._lives = [0] * len(self.workers)
        self._running: dict[int, Any] = {}
        self._started = False
        self._given_up: set[int] = set()
        self._search = _RoomSearch(
            cfg.run.worker_placement_timeout_s,
            lambda rank: self._new_worker(rank, self._drawn[rank], self._lives[rank]),
        )
        """Where the given-up ranks' next workers look for room."""
        self.turns = GpuTurns(_Engines(lambda: self.workers)) if cfg.ray.colocate else None
        """`ray.colocate`: the learner's turns on the GPU its engine shares."""

    def _new_worker(self, rank: int, drawn: int, life: int) -> Any:
        """Rollout worker `rank`'s actor, going on after `drawn` tasks, in its `life`-th life
        (named only for a replacement)."""
        later = {"life": life} if life else {}
        return _actor(
            self._worker_class,
            num_cpus=1,
            num_gpus=self.cfg.ray.worker_num_gpus,
            resources=self.cfg.ray.worker_resources or None,
            max_concurrency=10_000,
            runtime_env={"env_vars": _worker_env(self.cfg)},
        ).remote(*self._worker_args, rank, self.queue, self.admission, drawn, **later)

    async def start(self) -> None:
        """Start every worker's engine and env, and join the learner's ranks. A worker not
        placed in time is given up (as after its node's loss), its place in the task stream
        kept for when it is taken back."""

        async def placed(rank: int, worker: Any) -> None:
            if not await self._placed(worker):
                del self.workers[rank]
                self._given_up.add(rank)
                return
            await worker.start.remote()

        workers = list(self.workers.items())
        await asyncio.gather(self.learner.start(), *(placed(r, w) for r, w in workers))
        self._started = True
        await self._write_processes()

    def given_up(self) -> list[int]:
        return sorted(self._given_up)

    async def open_weight_sync(self) -> bool:
        """Join the engines to the learner's weight transfer; whether the learner trains in
        bf16 (as it resolved `learner.bf16`)."""
        workers = list(self.workers.values())
        ranks = await asyncio.gather(*(w.weight_transfer_ranks.remote() for w in workers))
        return await self.learner.open_weight_sync(workers, list(ranks))

    def run_workers(self) -> None:
        self._running = {rank: w.run.remote() for rank, w in self.workers.items()}

    def stop_workers(self) -> None:
        import ray

        for ref in self._running.values():
            ray.cancel(ref)

    async def aclose(self) -> None:
        import ray

        self._search.cancel()
        self.stop_workers()
        if self._started:  # else a worker may be inside vLLM's start-up, which nothing cuts
            closing = (w.close.remote() for w in self.workers.values())
            await asyncio.gather(*closing, return_exceptions=True)
        self.queue.shutdown()
        self.learner.kill()
        for actor in [self.admission, *self.workers.values()]:
            ray.kill(actor)

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        return await self.queue.get_batch(most, timeout_s=timeout_s)

    async def give_back(self, groups: int) -> None:
        await self.admission.discard.remote(groups)

    def check_workers(self) -> None:
        import ray

        if not self._running:
            return
        done, _ = ray.wait(list(self._running.values()), timeout=0)
        for ref in done:
            ray.get(ref)  # raises the worker's error
            raise AgentHubError("a rollout worker stopped producing episodes")
        if self.room_again():
            raise ClusterNews("a given-up rollout worker found room")

    def queue_depth(self) -> int:
        return self.queue.qsize()

    async def queued(self) -> list[list[Trajectory]]:
        return await self.queue.snapshot()

    async def hold_places(self, groups: int) -> None:
        await self.admission.hold.remote(groups)

    async def learn(self, batch: TrainBatch) -> dict[str, float]:
        if self.turns is not None:
            return await self.turns.step(lambda: self.learner.step(batch))
        learned: dict[str, float] = await self.learner.step(batch)
        return learned

    async def send_weights(self, version: int) -> float:
        if self.turns is not None:
            return await self.turns.sync(lambda: self.learner.send_weights(version))
        seconds: float = await self.learner.send_weights(version)
        return seconds

    async def admit_version(self, version: int) -> None:
        await self.admission.set_version.remote(version)

    async def worker_stats(self) -> list[WorkerStats | None]:
        """Each rank's, None for a worker that died or a rank given up."""
        stats = await asyncio.gather(
            *(w.stats.remote() for w in self.workers.values()), return_exceptions=True
        )
        by_rank = dict(zip(self.workers, stats, strict=True))
        return [
            None if isinstance(s := by_rank.get(rank), BaseException) else s
            for rank in range(len(self._lives))
        ]

    async def evaluate(self, cfg: HeldOutConfig) -> EvalSummary:
        first = self.workers[min(self.workers)]
        result: EvalSummary = await first.evaluate.remote(
            cfg.tasks, cfg.split, cfg.temperature, cfg.samples_per_task
        )
        return result

    async def save_checkpoint(self, directory: Path, tag: str) -> None:
        await self.learner.save_checkpoint(directory, tag)

    async def save_model(self, directory: Path, about: dict[str, Any]) -> None:
        await self.learner.save_model(directory, about)

    async def load_checkpoint(self, directory: Path, tag: str) -> int:
        return await self.learner.load_checkpoint(directory, tag)

    async def lost(self) -> Lost:
        import ray

        async def death(actor: Any) -> BaseException | None:
            try:
                await asyncio.wait_for(actor.__ray_ready__.remote(), timeout=_PING_S)
            except ray.exceptions.RayActorError as exc:
                died: BaseException = exc
                return died
            except TimeoutError:
                return None  # busy, not dead
            return None

        # One rank lost is the whole learner lost: the others wait on it in every collective.
        ranks = len(self.learner.actors)
        actors = [*self.learner.actors, *self.workers.values()]
        deaths = await asyncio.gather(*(death(a) for a in actors))
        learner = next((e for e in deaths[:ranks] if e is not None), None)
        found = zip(self.workers, deaths[ranks:], strict=True)
        workers = {rank: e for rank, e in found if e is not None}
        return Lost(learner, workers)

    async def replace_workers(self, ranks: list[int], version: int) -> Replaced:
        """Each new worker is its rank's next life: the admission gate ignores what the dead
        one still had pending there, and has given its places back. A rank whose new worker
        is not placed in time is left empty (its share of the tasks waits for a resumed run).
        Every engine left then joins a new weight-transfer group with the learner (the old one
        had a dead member) and gets the weights of `version`."""
        import ray

        playing = bool(self._running)
        lost_groups = 0
        for rank in ranks:
            ray.kill(self.workers.pop(rank), no_restart=True)
            self._running.pop(rank, None)
            groups, drawn = await self.admission.forget.remote(rank)
            lost_groups += groups
            if drawn is not None:
                self._drawn[rank] = drawn
            self._lives[rank] += 1
        new = {rank: self._new_worker(rank, self._drawn[rank], self._lives[rank]) for rank in ranks}
        placed = await asyncio.gather(*(self._placed(w) for w in new.values()))
        new = {rank: w for (rank, w), ok in zip(new.items(), placed, strict=True) if ok}
        episodes = lost_groups * self.cfg.rollout.n_samples_per_prompt
        given_up = [rank for rank in ranks if rank not in new]
        self._given_up.update(given_up)
        if new or self.workers:
            await asyncio.gather(*(w.start.remote() for w in new.values()))
            await self._join(new, version, playing)
        return Replaced(episodes, given_up, len(self.workers))

    async def _join(self, new: dict[int, Any], version: int, playing: bool) -> None:
        """Add the started workers `new` to the run: every engine joins a new weight-transfer
        group with the learner and gets the weights of `version`, and (`playing`) the new
        workers play."""
        self.workers = dict(sorted({**self.workers, **new}.items()))
        self._given_up.difference_update(new)
        await self.open_weight_sync()
        await self.send_weights(version)
        await self.admit_version(version)
        if playing:
            self._running |= {rank: w.run.remote() for rank, w in new.items()}
        await self._write_processes()

    def room_again(self) -> bool:
        return self._search.found(sorted(self._given_up))

    async def take_back(self, version: int) -> list[int]:
        new = self._search.take()
        if new:
            await self._join(new, version, bool(self._running))
        return sorted(new)

    async def _placed(self, worker: Any) -> bool:
        return await _placed(worker, self.cfg.run.worker_placement_timeout_s)

    async def episodes_in_flight(self) -> int:
        groups = int(await self.admission.groups_in_flight.remote())
        return groups * self.cfg.rollout.n_samples_per_prompt

    async def _write_processes(self) -> None:
        """Each learner rank's and each worker's process id, to `processes`: `learner` is
        rank 0's (a learner of one rank is that one), `learner_ranks` every rank's in order;
        and the Ray node of each (`nodes`: the driver's, and lists as those)."""
        from agenthub.trainer._shipping import node_id

        if self.processes is None:
            return

        def where(actor: Any) -> Any:
            return actor.__ray_call__.remote(lambda self: (os.getpid(), node_id()))

        ranks, actors = len(self.learner.actors), [*self.learner.actors, *self.workers.values()]
        pids, nodes = zip(*await asyncio.gather(*(where(a) for a in actors)), strict=True)
        about = {"learner": pids[0], "learner_ranks": pids[:ranks], "rollout_workers": pids[ranks:]}
        about["nodes"] = {"driver": node_id(), "learner_ranks": nodes[:ranks]}
        about["nodes"]["rollout_workers"] = nodes[ranks:]
        self.processes.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.processes, json.dumps(about))


class _Engines:
    """The rollout workers' engines as one colocated engine (`GpuTurns`): the live ones at
    each call (`workers`, which a replacement renews)."""

    def __init__(self, workers: Callable[[], dict[int, Any]]) -> None:
        self.workers = workers

    async def sleep(self, level: int) -> None:
        await asyncio.gather(*(w.sleep.remote(level) for w in self.workers().values()))

    async def wake_up(self, tags: list[str] | None) -> None:
        await asyncio.gather(*(w.wake_up.remote(tags) for w in self.workers().values()))


class _RoomSearch:
    """The look for room for the ranks given up, in the background: a try places a new worker
    for each (`new_worker(rank)`: it goes on from the rank's place in the task stream), waits
    up to `timeout_s` for Ray to place it, and starts those placed; the others are killed,
    and the next try starts when the driver asks again. So a cluster with no room is asked once
    every `timeout_s`, and a node that joins is used within that time."""

    def __init__(self, timeout_s: float, new_worker: Callable[[int], Any]) -> None:
        self.timeout_s = timeout_s
        self.new_worker = new_worker
        self._try: asyncio.Task[dict[int, Any]] | None = None
        self._trying: dict[int, Any] = {}
        """The try's workers, by rank (killed if the run ends first)."""

    def found(self, ranks: list[int]) -> bool:
        """Whether the last try found room (its workers started, to `take`); starts a try for
        `ranks` when none is under way. Raises the error of a new worker that failed to
        start."""
        if self._try is not None and self._try.done():
            if self._try.result():
                return True
            self._try = None  # none found room: try again
        if self._try is None and ranks:
            self._try = asyncio.create_task(self._place(ranks))
        return False

    def take(self) -> dict[int, Any]:
        """The started workers of a try that found room, by rank (none while it runs)."""
        if self._try is None or not self._try.done():
            return {}
        new, self._try, self._trying = self._try.result(), None, {}
        return new

    async def _place(self, ranks: list[int]) -> dict[int, Any]:
        import ray

        self._trying = {rank: self.new_worker(rank) for rank in ranks}
        placed = await asyncio.gather(*(_placed(w, self.timeout_s) for w in self._trying.values()))
        new = {r: w for (r, w), ok in zip(self._trying.items(), placed, strict=True) if ok}
        try:
            await asyncio.gather(*(w.start.remote() for w in new.values()))
        except BaseException:
            for actor in new.values():
                ray.kill(actor, no_restart=True)
            raise
        return new

    def cancel(self) -> None:
        """End the try under way, and kill its workers."""
        import ray

        if self._try is not None:
            self._try.cancel()
        for actor in self._trying.values():
            ray.kill(actor, no_restart=True)


async def _placed(worker: Any, timeout_s: float) -> bool:
    """Whether the new actor `worker` found room in the cluster and came up within
    `timeout_s` (`run.worker_placement_timeout_s`); if not, it is killed (Ray would keep it
    waiting for a node for ever)."""
    import ray

    try:
        await asyncio.wait_for(worker.__ray_ready__.remote(), timeout_s)
    except TimeoutError:
        ray.kill(worker, no_restart=True)
        return False
    return True


def start_ray(cfg: TrainConfig, library_log: Path | None = None) -> None:
    """Start Ray on this machine, or join the cluster at `ray.address`; a no-op when Ray is
    up already. Refuses GPUs this machine lacks rather than wait for them for ever. With
    `library_log`, what Ray, vLLM, DeepSpeed and Triton say goes to that file, in this process
    and in every process of the run, rather than to the terminal."""
    import ray

    if ray.is_initialized():
        return
    # The run's stdout is its JSON summary; its processes print to stderr.
    runtime_env: dict[str, Any] = {"worker_process_setup_hook": _OUTPUT_TO_STDERR}
    if library_log is not None:
        route_library_logs(library_log)
        runtime_env["env_vars"] = library_log_env(library_log)
    options: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": "WARNING",
        "log_to_driver": True,
        "runtime_env": runtime_env,
    }
    if cfg.ray.address:
        _join_ray(cfg.ray.address, options)
        return
    # Ray runs its workers at niceness 15 by default; here they are the job itself, and would
    # lose their cores to anything else on the machine.
    os.environ.setdefault("RAY_worker_niceness", "0")
    cores = os.cpu_count() or 1
    if cfg.ray.learner_ranks > cores:
        raise AgentHubError(
            f"ray.learner_ranks={cfg.ray.learner_ranks} asks for a learner rank per core and "
            f"this machine has {cores} cores; set ray.learner_ranks to at most {cores}, or join "
            "a cluster with --ray-address"
        )
    cpus = max(cores, cfg.ray.rollout_workers + cfg.ray.learner_ranks)
    # Ray's processes (and the actors' and engines' under them) share this terminal's process
    # group: with SIGHUP blocked they inherit, a hang-up stops the run through its handler,
    # with a checkpoint, rather than killing the cluster under it.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        ray.init(num_cpus=cpus, **options)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    # Ray waits forever for GPUs a machine lacks; on a cluster they may yet join.
    r = cfg.ray
    wanted = r.learner_ranks * r.learner_num_gpus + r.rollout_workers * r.worker_num_gpus
    have = float(ray.cluster_resources().get("GPU", 0.0))
    if wanted > have:
        raise AgentHubError(
            f"the run asks for {wanted:g} GPUs (ray.learner_num_gpus="
            f"{r.learner_num_gpus:g} for each of {r.learner_ranks} learner ranks, "
            f"ray.worker_num_gpus={r.worker_num_gpus:g} per rollout worker) and this machine has "
            f"{have:g}; set them to what it has (0 trains on the CPU), or join a cluster with "
            "--ray-address"
        )


def _join_ray(address: str, options: dict[str, Any]) -> None:
    """`ray.init(address=...)`, failing with what to do: Ray itself retries an address that
    does not answer for minutes, and names its own flags when `auto` finds no cluster."""
    import ray

    hint = (
        "start the cluster's head with `ray start --head` (its address is printed), or leave "
        "out --ray-address (ray.address) to train on this machine alone"
    )
    host, colon, port = address.rpartition(":")
    if colon and port.isdigit() and "://" not in address:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
        except OSError as exc:
            raise AgentHubError(f"no Ray cluster answers at {address} ({exc}); {hint}") from None
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise AgentHubError(f"could not join a Ray cluster at {address} ({exc}); {hint}") from None


def _this_node() -> Any:
    """Ray's placement on this process's node, and no other."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return NodeAffinitySchedulingStrategy(node, soft=False)


def _actor(cls: type, **options: Any) -> Any:
    """`cls` as a Ray actor class with `options` (typed loosely: Ray's stubs do not follow
    methods through `.remote`)."""
    import ray

    return ray.remote(cls).options(**options)


def _worker_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment of a rollout worker: its engine's CPU threads, vLLM's chatter (start-up,
    and a warning at every weight sync that rotary embeddings have no weights to load) kept
    out of the run's output unless the user asks for it with VLLM_LOGGING_LEVEL, and asyncio's
    own event loop, which environments run on everywhere else (`agenthub eval`, the REPL,
    `check_env`), so an env trains on the loop it was checked on. Ray's default, uvloop,
    refuses some of what asyncio takes (`open_process(user=...)`, which the bwrap sandbox
    once used, so every code_exec episode failed there)."""
    return {
        "OMP_NUM_THREADS": str(cfg.ray.worker_threads),
        "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
        "RAY_USE_UVLOOP": "0",
    }
