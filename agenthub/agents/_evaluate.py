"""`evaluate`: a model's reward on an environment's tasks, as `agenthub eval`, the trainer's
held-out evaluation and a user's script all measure it (the figures, and how they are defined,
are `EvalSummary`'s).

Episodes are seeded (each env reset and each request's sampling seed derive from `seed`, the
task, the sample and the turn), so the same model, tasks, seed and sampling give the same
episodes, and the same reward, from `agenthub eval` and from the trainer.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from agenthub._errors import AgentHubError
from agenthub._types import Task
from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig
from agenthub.agents._engine import InferenceEngine
from agenthub.agents._engines import open_engine, rollout_config
from agenthub.agents._eval_summary import EvalSummary
from agenthub.agents._run_dir import (
    EvalIdentity,
    append_jsonl,
    changed_fields,
    load_tasks,
    locked,
    read_jsonl,
    write_atomic,
)
from agenthub.agents._runner import EpisodeRunner
from agenthub.agents._trajectory import Trajectory

__all__ = [
    "FAILED",
    "RUN",
    "SUMMARY",
    "TRAJECTORIES",
    "EvalConfig",
    "EvalRun",
    "aevaluate",
    "evaluate",
]

TRAJECTORIES = "trajectories.jsonl"
FAILED = "failed.jsonl"  # episodes that ended in errors, moved out of TRAJECTORIES to be re-run
SUMMARY = "summary.json"
RUN = "eval.json"

OnTrajectory = Callable[[Trajectory], Awaitable[None]]


class EvalConfig(BaseModel):
    """What to evaluate, and how each episode is sampled (`agenthub eval`'s flags, by field).
    Sampling and budget fields have the names, and the meaning, of the trainer's `rollout`
    section."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    env: str
    """Environment id, as `agenthub.make` takes it."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Arguments of the environment."""
    tasks_file: str | None = None
    """A JSONL task file, read with the field names the env was given; unset, the env's own
    `split`."""
    split: str = "held_out"
    """The env's split to take tasks from ("held_out" or "train")."""
    num_tasks: int | None = Field(None, ge=1)
    """The first N tasks; unset, all of them."""
    samples_per_task: int = Field(1, ge=1)
    """Episodes per task (the k of pass@k)."""
    model: str | None = None
    """A local Hugging Face model directory, or "default" (the embedded default model, built on
    first use; also what unset means without `base_url`)."""
    base_url: str | None = None
    """An OpenAI-compatible server that takes token ids, ending in /v1; `model` then gives only
    its tokenizer."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature (0: greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling."""
    seed: int = 0
    """Seeds every env reset and every request's sampling, derived per task, sample and turn."""
    max_reply_tokens: int = Field(512, ge=1)
    """Tokens per model reply."""
    max_tokens: int | None = Field(None, ge=2)
    """Longest token sequence of an episode (default: the model's context)."""
    max_turns: int | None = Field(None, ge=1)
    """Replies per episode; unset, the env decides when its episodes end (within
    `max_tokens`)."""
    stop: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    """Strings that end a reply once it writes one (kept in the reply), besides the env's."""
    chat_template: bool = True
    """Render prompts through the tokenizer's chat template; false tokenizes text prompts as
    they are."""
    concurrency: int = Field(32, ge=1)
    """Episodes in flight at once."""
    generate_timeout_s: float = Field(300.0, gt=0)
    """A reply slower than this ends its episode as `generation_timeout`."""
    env_step_timeout_s: float = Field(300.0, gt=0)
    """An env `reset` or `step` slower than this ends its episode as `env_timeout`."""

    def rollout(self) -> RolloutConfig:
        """The `RolloutConfig` every episode of this evaluation gets."""
        return rollout_config(
            self,
            samples=self.samples_per_task,
            concurrency=self.concurrency,
            seed=self.seed,
            sampling_seed=self.seed,
        )

    def load_tasks(self) -> list[Task]:
        """The tasks this evaluation plays (`AgentHubError` for none, or repeated ids)."""
        return load_tasks(
            self.env,
            self.env_kwargs,
            tasks_file=self.tasks_file,
            split=self.split,
            limit=self.num_tasks,
        )


def evaluate(
    config: EvalConfig,
    *,
    out: str | Path | None = None,
    engine: InferenceEngine | None = None,
    chat: ChatTokenizer | None = None,
    tasks: Sequence[Task] | None = None,
    on_trajectory: OnTrajectory | None = None,
) -> EvalSummary:
    """Evaluate `config.model` on `config.env`'s tasks; see `aevaluate`."""
    return anyio.run(
        functools.partial(
            aevaluate,
            config,
            out=out,
            engine=engine,
            chat=chat,
            tasks=tasks,
            on_trajectory=on_trajectory,
        )
    )


async def aevaluate(
    config: EvalConfig,
    *,
    out: str | Path | None = None,
    engine: InferenceEngine | None = None,
    chat: ChatTokenizer | None = None,
    tasks: Sequence[Task] | None = None,
    on_trajectory: OnTrajectory | None = None,
) -> EvalSummary:
    """Play `samples_per_task` episodes of each task and summarize them (the figures as
    `EvalSummary` defines them: an episode that ended in an error counts as 0).

    `engine` and `chat` (given together) evaluate on an engine already running, left open;
    without them one is started for `config.model` and closed after. `tasks` replaces the
    config's task source. With `out`, the run directory `agenthub eval` writes (`eval.json`,
    `trajectories.jsonl`, `summary.json`) is used: a second call with the same config plays
    only the episodes missing, those that ended in errors among them, and one with another
    config is refused. `on_trajectory` is awaited with each episode as it finishes.

    Raises `AgentHubError` for what the user can fix (a wrong model, env, task source, an
    `out` holding another run); a failed episode is not raised, it counts as 0."""
    if (engine is None) != (chat is None):
        raise ValueError("give engine and chat together, or neither (to start one)")
    if tasks is None:
        tasks = await anyio.to_thread.run_sync(config.load_tasks)
    if out is None:
        async with _engine(config, engine, chat) as (chat, engine):
            done = await _play(config, chat, engine, tasks, on_trajectory)
        return EvalSummary.of(done, config.samples_per_task)
    with locked(Path(out), command="eval"):
        run = EvalRun.open(config, Path(out), tasks)
        if run.work:
            async with _engine(config, engine, chat) as (chat, engine):
                await run.aplay(engine, chat, on_trajectory)
        return run.summary()


async def _play(
    config: EvalConfig,
    chat: ChatTokenizer,
    engine: InferenceEngine,
    tasks: Sequence[Task],
    on_trajectory: OnTrajectory | None,
) -> list[Trajectory]:
    done: list[Trajectory] = []

    async def keep(trajectory: Trajectory) -> None:
        done.append(trajectory)
        if on_trajectory is not None:
            await on_trajectory(trajectory)

    runner = EpisodeRunner(engine, chat, config.env, config.rollout(), env_kwargs=config.env_kwargs)
    await runner.run(tasks, on_trajectory=keep)
    return done


@asynccontextmanager
async def _engine(
    config: EvalConfig, engine: InferenceEngine | None, chat: ChatTokenizer | None
) -> AsyncIterator[tuple[ChatTokenizer, InferenceEngine]]:
    """The engine given, or one started for the config (and closed after)."""
    if engine is not None and chat is not None:
        yield chat, engine
        return
    chat, engine = await open_engine(
        config.model, base_url=config.base_url, seed=config.seed, concurrency=config.concurrency
    )
    try:
        yield chat, engine
    finally:
        await engine.aclose()


class EvalRun:
    """An evaluation's run directory, held (`locked`) by the caller: `eval.json` (the run's
    identity), `trajectories.jsonl` (one line per finished episode, appended as each ends),
    `failed.jsonl` (episodes that ended in errors, moved out to be played again) and
    `summary.json`. `open` checks the directory holds this run, or none, and finds the work
    left: `kept` episodes from an earlier call, `work` the (task, samples) still to play."""

    def __init__(self, config: EvalConfig, out: Path, tasks: Sequence[Task]) -> None:
        self.config = config
        self.out = out
        self.tasks = list(tasks)
        self.total = len(self.tasks) * config.samples_per_task
        self.kept: list[Trajectory] = []
        self.rerun = 0  # episodes that ended in errors, moved to FAILED to be played again
        self.work: list[tuple[Task, list[int]]] = []

    @classmethod
    def open(cls, config: EvalConfig, out: Path, tasks: Sequence[Task]) -> EvalRun:
        """`out` made ready for `config`'s run; `AgentHubError` if it holds another run."""
        run = cls(config, out, tasks)
        finished = run.prepare(EvalIdentity.of(config))
        wanted = {t.id for t in run.tasks}
        k = config.samples_per_task
        run.kept = [t for t in finished if t.task_id in wanted and t.sample < k]
        done: dict[str, set[int]] = defaultdict(set)
        for t in run.kept:
            done[t.task_id].add(t.sample)
        missing = {t.id: [i for i in range(k) if i not in done[t.id]] for t in run.tasks}
        run.work = [(t, missing[t.id]) for t in run.tasks if missing[t.id]]
        return run

    def prepare(self, identity: EvalIdentity) -> list[Trajectory]:
        """Check `out` holds the same run, or take it over; return the episodes it finished.
        Episodes that ended in errors are not finished: their lines move to `FAILED`. A run
        that finished no episode (its start failed on a wrong model or server, say) holds
        nothing another run's settings could mix with: it is taken over."""
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        trajectories = read_jsonl(out / TRAJECTORIES, Trajectory, repair=True)
        finished = [t for t in trajectories if t.error is None]
        if (out / RUN).exists() and finished:
            recorded = EvalIdentity.model_validate_json((out / RUN).read_text(encoding="utf-8"))
            if changed := changed_fields(recorded, identity, assumed=EvalIdentity.ASSUMED):
                raise AgentHubError(
                    f"{out} holds an eval run with different {', '.join(changed)}; "
                    "pass another --out, or delete the directory to start over"
                )
        else:
            write_atomic(out / RUN, identity.model_dump_json(indent=2) + "\n")
        if failed := [t for t in trajectories if t.error is not None]:
            append_jsonl(out / FAILED, failed)
            write_atomic(out / TRAJECTORIES, "".join(t.model_dump_json() + "\n" for t in finished))
            self.rerun = len(failed)
        return finished

    async def aplay(
        self,
        engine: InferenceEngine,
        chat: ChatTokenizer,
        on_trajectory: OnTrajectory | None = None,
    ) -> None:
        """Play the work left, appending each episode to `trajectories.jsonl` as it ends."""
        config = self.config
        runner = EpisodeRunner(
            engine, chat, config.env, config.rollout(), env_kwargs=config.env_kwargs
        )
        with (self.out / TRAJECTORIES).open("a", encoding="utf-8") as sink:

            async def write(trajectory: Trajectory) -> None:
                sink.write(trajectory.model_dump_json() + "\n")
                sink.flush()
                if on_trajectory is not None:
                    await on_trajectory(trajectory)

            await runner.run(self.work, on_trajectory=write)

    def finished(self) -> list[Trajectory]:
        """The episodes of this run's tasks in `trajectories.jsonl` (the directory may hold
        more, from an earlier call with more tasks)."""
        wanted = {t.id for t in self.tasks}
        return [
            t
            for t in read_jsonl(self.out / TRAJECTORIES, Trajectory)
            if t.task_id in wanted and t.sample < self.config.samples_per_task
        ]

    def summary(self) -> EvalSummary:
        """The summary of this run's episodes, written to `summary.json`."""
        summary = EvalSummary.of(self.finished(), self.config.samples_per_task)
        write_atomic(self.out / SUMMARY, summary.model_dump_json(indent=2) + "\n")
        return summary
