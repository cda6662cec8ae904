"""The episode runner: many episodes as asyncio tasks, each with its own env instance."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, TypeVar

import anyio

from agenthub._env import Env
from agenthub._errors import RewardFuncError, RewardModelError
from agenthub._registry import make
from agenthub._returns import (
    EnvReturnError,
    checked_stop,
    checked_system_prompt,
    checked_tools,
    reset_problems,
    step_problems,
)
from agenthub._spec import EnvSpec
from agenthub._tracebacks import described, raised_at
from agenthub._transcript import stepping
from agenthub._types import Step, Task
from agenthub._watchdog import loop_watchdog
from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig
from agenthub.agents._engine import Generation, InferenceEngine
from agenthub.agents._errors import ChatTemplateError, EngineError
from agenthub.agents._program import ProgramPlayer
from agenthub.agents._session import Session
from agenthub.agents._trajectory import EpisodeError, ErrorCause, Timings, Trajectory
from agenthub.envs.agent_program import AgentProgramEnv

__all__ = ["EpisodeRunner", "Scorer"]

T = TypeVar("T")


class Scorer(Protocol):
    """An outcome scorer run once on each finished episode (a reward model or a judge over the
    whole conversation). Its reward is added to the last step's; failures are recorded as
    `score_error`, overruns of `Timeouts.score_s` as `score_timeout`."""

    async def __call__(self, task: Task, trajectory: Trajectory) -> float: ...


class _Failed(Exception):
    def __init__(self, cause: ErrorCause, message: str) -> None:
        self.error = EpisodeError(cause=cause, message=message)


@dataclass
class _Episode:
    """The running state of one episode."""

    session: Session | None = None
    terminated: bool = False
    truncated: bool = False
    turns: int = 0
    score: float | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.rewards: list[float] = []
        self.finish_reasons: list[Literal["stop", "length"]] = []
        self.extra_logs: dict[str, float] = {}
        self.timings = Timings()


async def _bounded(
    call: Callable[[], Awaitable[T]], limit_s: float | None, failure: ErrorCause, what: str
) -> T:
    """Await `call()`, turning an overrun into a typed failure. Only the deadline set here
    counts as a timeout: a `TimeoutError` raised inside the call is the callee's own failure."""
    with anyio.move_on_after(math.inf if limit_s is None else limit_s) as scope:
        return await call()
    assert scope.cancelled_caught
    raise _Failed(failure, f"{what} took longer than {limit_s} s")


def _check(problems: list[str]) -> None:
    """An env that returns the wrong thing fails its episode, like one that raises."""
    if problems:
        raise _Failed("env_error", "; ".join(problems))


@contextmanager
def _untokenizable(what: str) -> Iterator[None]:
    """An env's messages the model's chat template cannot render fail that episode only."""
    try:
        yield
    except ChatTemplateError as exc:
        told = "its observation" if what == "step" else "the prompt, first observation or tools"
        raise _Failed("env_error", f"{what}: {told} cannot be tokenized: {exc}") from exc


def _read(env: Env[Any], what: str, checked: Callable[[Env[Any]], T]) -> T:
    """An attribute the runner reads from the env after `reset` (`tools`, `stop`,
    `system_prompt`), checked:
    one that is wrong, or a property that raises, fails the episode."""
    try:
        return checked(env)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, EnvReturnError) else described(exc)
        raise _Failed("env_error", f"{what}: {detail}") from exc


def _derive_seed(base: int, task_id: str, sample: int, turn: int = -1) -> int:
    digest = hashlib.blake2b(f"{base}:{task_id}:{sample}:{turn}".encode(), digest_size=4)
    return int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF


class EpisodeRunner:
    """Runs episodes of one environment against one engine.

    Each episode builds its own env with `agenthub.make(env)`, so concurrent episodes never
    share an instance; the env is always `aclose`d, also when the episode fails or is
    cancelled. An env that raises or overruns its timeout, an engine failure, or a failing
    scorer ends only that episode, recorded on its trajectory as a typed `EpisodeError`.
    Anything else (a broken chat template, a bug) raises.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        chat: ChatTokenizer,
        env: str | EnvSpec,
        config: RolloutConfig,
        *,
        env_kwargs: dict[str, Any] | None = None,
        scorer: Scorer | None = None,
    ) -> None:
        self.engine = engine
        self.chat = chat
        self.env = env
        self.env_id = env if isinstance(env, str) else env.id
        self.env_kwargs = env_kwargs or {}
        self.config = config
        self.scorer = scorer
        self._programs: ProgramPlayer | None = None
        self._sampling = config.sampling.replace(
            stop_token_ids=tuple(sorted({*config.sampling.stop_token_ids, *chat.stop_token_ids}))
        )

    async def run(
        self,
        work: Iterable[Task] | Iterable[tuple[Task, int | Sequence[int]]],
        *,
        on_trajectory: Callable[[Trajectory], Awaitable[None]] | None = None,
        on_group: Callable[[list[Trajectory]], Awaitable[None]] | None = None,
        admission: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """Run every task's group of episodes, at most `config.concurrency` episodes at once.

        `work` gives tasks (each run `n_samples_per_prompt` times), `(task, n)` pairs (samples
        0..n-1) or `(task, samples)` pairs naming which samples to run (a resumed eval's).
        `on_trajectory` is awaited as each episode finishes, `on_group` as each task's group
        does; both apply back-pressure. `admission`, when given, is awaited before each group
        starts (the trainer's bound on how far rollouts run ahead of the learner). Tasks are
        read lazily, so `work` may be endless.
        """
        limiter = anyio.CapacityLimiter(self.config.concurrency)
        # As many groups as the slots hold wait ready behind them: a group keeps its place
        # until its slowest episode ends, and its faster ones' slots go to the next group's
        # episodes meanwhile. With one group waiting, slots sat idle ~12% of the time
        # (heavy-tailed episodes, groups of 8 in 32 slots); with as many, under 1%.
        groups = math.ceil(self.config.concurrency / self.config.n_samples_per_prompt)
        admit = anyio.Semaphore(2 * groups)

        async def group(task: Task, samples: Sequence[int]) -> None:
            try:
                finished: dict[int, Trajectory] = {}

                async def one(i: int) -> None:
                    async with limiter:
                        finished[i] = await self.run_episode(task, sample=i)
                    if on_trajectory is not None:
                        await on_trajectory(finished[i])

                async with anyio.create_task_group() as tg:
                    for i in samples:
                        tg.start_soon(one, i)
                if on_group is not None:
                    await on_group([finished[i] for i in samples])
            finally:
                admit.release()

        async with loop_watchdog(), anyio.create_task_group() as tg:
            for item in work:
                task, n = item if isinstance(item, tuple) else (item, None)
                n = self.config.n_samples_per_prompt if n is None else n
                await admit.acquire()
                if admission is not None:
                    await admission()
                tg.start_soon(group, task, range(n) if isinstance(n, int) else n)

    async def collect(
        self, work: Iterable[Task] | Iterable[tuple[Task, int | Sequence[int]]]
    ) -> list[Trajectory]:
        """Run `work` and return every trajectory, in the order they finished."""
        out: list[Trajectory] = []

        async def keep(trajectory: Trajectory) -> None:
            out.append(trajectory)

        await self.run(work, on_trajectory=keep)
        return out

    async def run_episode(self, task: Task, *, sample: int = 0) -> Trajectory:
        """Run one episode of `task` in a fresh env instance and return its trajectory."""
        env = make(self.env, **self.env_kwargs)
        if isinstance(env.unwrapped, AgentProgramEnv):
            return await self._run_program(env, task, sample)
        state = _Episode()
        start = time.perf_counter()
        error: EpisodeError | None = None
        try:
            await self._play(env, task, sample, state)
        except _Failed as failure:
            error = failure.error
        finally:
            closing = await self._close(env)
        if error is None and closing is not None:
            error = closing
        state.timings.total_s = time.perf_counter() - start
        trajectory = self._trajectory(task, sample, state, error)
        if self.scorer is not None and error is None:
            trajectory = await self._score(task, trajectory)
        return trajectory

    async def _run_program(self, env: Env[Any], task: Task, sample: int) -> Trajectory:
        """An agent program's episode: the program drives the engine through the endpoint."""
        assert isinstance(env.unwrapped, AgentProgramEnv)
        if self._programs is None:
            self._programs = ProgramPlayer(self.engine, self.chat, self.config, self.env_id)
        seed = self.config.sampling.seed
        seed = None if seed is None else _derive_seed(seed, task.id, sample)
        try:
            trajectory = await self._programs.play(env.unwrapped, task, sample, seed)
        finally:
            closing = await self._close(env)
        if closing is not None and trajectory.error is None:
            trajectory = _failed(trajectory, closing)
        if self.scorer is not None and trajectory.error is None:
            trajectory = await self._score(task, trajectory)
        return trajectory

    async def _close(self, env: Env[Any]) -> EpisodeError | None:
        # Shielded: a cancelled episode still releases its env, within `close_s`.
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.timeouts.close_s):
            try:
                await env.aclose()
            except Exception as exc:
                return EpisodeError(cause="env_error", message=f"aclose: {described(exc)}")
        return None

    async def _play(self, env: Env[Any], task: Task, sample: int, state: _Episode) -> None:
        config = self.config
        seed = None if config.seed is None else _derive_seed(config.seed, task.id, sample)
        reset = await self._env_call(state, "reset", lambda: env.reset(task, seed=seed))
        _check(reset_problems(reset))
        observation, _ = reset
        tools = _read(env, "tools", checked_tools)
        state.stop = _read(env, "stop", checked_stop)
        system_prompt = _read(env, "system_prompt", checked_system_prompt)
        with _untokenizable("reset"):
            session = Session.start(
                self.chat,
                task,
                observation,
                chat_template=config.chat_template,
                policy_version=self.engine.policy_version,
                tools=tools,
                system_prompt=system_prompt,
            )
        state.session = session
        limit = self.engine.max_model_len
        if config.max_tokens is not None:
            limit = min(limit, config.max_tokens)
        while True:
            room = limit - len(session)
            out_of_turns = config.max_turns is not None and state.turns >= config.max_turns
            if out_of_turns or room < 1:
                state.truncated = True
                return
            generation = await self._generate(session, task, sample, state, room)
            action = session.add_generation(generation)
            state.turns += 1
            state.finish_reasons.append(
                "length" if generation.finish_reason == "length" else "stop"
            )
            with stepping(session.transcript()):
                step = await self._env_call(state, "step", partial(env.step, action))
            _check(step_problems(step))
            self._record(step, state)
            if step.terminated or step.truncated:
                state.terminated, state.truncated = step.terminated, step.truncated
                return
            before = len(session)
            with _untokenizable("step"):
                session.add_observation(step.observation, self.engine.policy_version)
            if len(session) >= limit:
                # The env's answer leaves no room to reply: it is dropped, not half-kept.
                session.rollback(before)
                state.truncated = True
                return

    async def _generate(
        self, session: Session, task: Task, sample: int, state: _Episode, room: int
    ) -> Generation:
        sampling = self._sampling.with_stop(state.stop)
        sampling = sampling.replace(max_tokens=min(sampling.max_tokens, room))
        if sampling.seed is not None:
            sampling = sampling.replace(
                seed=_derive_seed(sampling.seed, task.id, sample, state.turns)
            )
        started = time.perf_counter()
        try:
            generation = await _bounded(
                lambda: self.engine.generate(session.tokens, sampling),
                self.config.timeouts.generate_s,
                "generation_timeout",
                "generate",
            )
        except EngineError as exc:
            raise _Failed("generation_error", str(exc)) from exc
        finally:
            state.timings.generate_s += time.perf_counter() - started
        if generation.finish_reason == "abort":
            raise _Failed("generation_error", "the engine aborted the request")
        return generation

    async def _env_call(self, state: _Episode, what: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            return await _bounded(call, self.config.timeouts.env_step_s, "env_timeout", what)
        except (RewardFuncError, RewardModelError) as exc:
            # A reward file's own exception is named at its line; agenthub's verdict on what a
            # scorer returned, or a reward server's failure, has no line of the user's to name.
            wrapped = exc.__cause__ if isinstance(exc, RewardFuncError) else None
            where = "" if wrapped is None else raised_at(wrapped, fallback=False)
            raise _Failed("score_error", f"{described(exc)}{where}") from exc
        except _Failed:
            raise
        except (Exception, SystemExit) as exc:
            # The env is user code: its failure (even a sys.exit deep in some library it calls)
            # is data about this episode, not the end of the run.
            raise _Failed("env_error", f"{what}: {described(exc)}{raised_at(exc)}") from exc
        finally:
            state.timings.env_s += time.perf_counter() - started

    @staticmethod
    def _record(step: Step[Any], state: _Episode) -> None:
        state.rewards.append(step.reward)
        if step.score is not None:
            state.score = step.score
        state.extra_logs.update(step.extra_logs)

    def _trajectory(
        self, task: Task, sample: int, state: _Episode, error: EpisodeError | None
    ) -> Trajectory:
        session = state.session
        return Trajectory(
            env=self.env_id,
            task_id=task.id,
            sample=sample,
            tokens=session.tokens if session else [],
            loss_mask=session.loss_mask if session else [],
            logprobs=session.logprobs if session else [],
            policy_versions=session.policy_versions if session else [],
            step_rewards=state.rewards,
            reward=sum(state.rewards),
            score=state.score,
            terminated=state.terminated and error is None,
            truncated=state.truncated and error is None,
            num_turns=state.turns,
            error=error,
            timings=state.timings,
            extra_logs=state.extra_logs,
            finish_reasons=state.finish_reasons,
        )

    async def _score(self, task: Task, trajectory: Trajectory) -> Trajectory:
        assert self.scorer is not None
        scorer = self.scorer
        started = time.perf_counter()
        try:
            reward = await _bounded(
                lambda: scorer(task, trajectory),
                self.config.timeouts.score_s,
                "score_timeout",
                "score",
            )
        except _Failed as failure:
            return _failed(trajectory, failure.error)
        except Exception as exc:
            # A scorer is user code too: its failure belongs to this episode only.
            message = described(exc)
            return _failed(trajectory, EpisodeError(cause="score_error", message=message))
        finally:
            trajectory.timings.score_s = time.perf_counter() - started
        rewards = trajectory.step_rewards or [0.0]
        rewards = [*rewards[:-1], rewards[-1] + reward]
        trajectory.timings.total_s += trajectory.timings.score_s
        return trajectory.model_copy(update={"step_rewards": rewards, "reward": sum(rewards)})


def _failed(trajectory: Trajectory, error: EpisodeError) -> Trajectory:
    return trajectory.model_copy(update={"error": error, "terminated": False, "truncated": False})
