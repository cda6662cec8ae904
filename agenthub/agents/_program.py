"""Playing an agent program's episode: the program drives, the endpoint records the tokens."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from agenthub._tracebacks import described, raised_at
from agenthub._types import Step, Task
from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig
from agenthub.agents._endpoint_episode import EndpointEpisode
from agenthub.agents._engine import InferenceEngine
from agenthub.agents._loopback import Loopback
from agenthub.agents._openai_endpoint import OpenAIEndpoint
from agenthub.agents._trajectory import EpisodeError, Timings, Trajectory
from agenthub.envs.agent_program import AgentProgramEnv, ProgramError

__all__ = ["ProgramPlayer"]


class ProgramPlayer:
    """Plays `AgentProgramEnv` episodes for the episode runner, through one `OpenAIEndpoint`
    shared by all of them (each episode under its own key, so concurrent programs' calls
    never mix).

    An episode: open an endpoint episode, run the program with an `openai.AsyncOpenAI`
    client on that episode's base URL (in-process, no socket) or, for a `command=` program,
    run the command against the episode's base URL on a loopback HTTP server (`Loopback`:
    up while command episodes run), close the endpoint episode, and score the program's
    result. The trajectory holds every segment's tokens in order, with
    `segments` marking where each later one starts; the reward is the episode's, shared by
    its segments. A failure is typed: the engine's (`generation_error`/`_timeout`, even when
    the program caught the HTTP error), the program's (`env_error`: raised, over budget, no
    call made), the reward's (`score_error`/`score_timeout`).

    `watch`, when given, is handed each endpoint episode as it opens, so that one watching
    the engine can tell which segment a call belongs to (the REPL shows the calls live).
    `outcome`, when given, is handed each episode's program result and the step that scored
    it (None when the episode failed before scoring), which the trajectory does not keep
    (the REPL shows them beside the reward).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        chat: ChatTokenizer,
        config: RolloutConfig,
        env_id: str,
        *,
        watch: Callable[[EndpointEpisode], object] | None = None,
        outcome: Callable[[Any, Step[Any] | None], object] | None = None,
    ) -> None:
        self.endpoint = OpenAIEndpoint(engine, chat, config)
        self.config = config
        self.env_id = env_id
        self.loopback = Loopback(self.endpoint.app)
        self.watch = watch
        self.outcome = outcome

    async def play(
        self, env: AgentProgramEnv, task: Task, sample: int, seed: int | None
    ) -> Trajectory:
        started = time.perf_counter()
        episode = self.endpoint.open_episode(seed=seed)
        if self.watch is not None:
            self.watch(episode)
        error: EpisodeError | None = None
        result: Any = None
        try:
            try:
                result = await self._run(env, task, episode.key)
            except ProgramError as exc:
                error = EpisodeError(cause="env_error", message=str(exc))
        finally:
            self.endpoint.close_episode(episode.key)
        program_s = time.perf_counter() - started
        error = episode.error or error
        if error is None and not episode.calls:
            error = EpisodeError(
                cause="env_error",
                message="the agent program returned without calling the model, so there is "
                "nothing to train on; have it call the client it is given",
            )
        step: Step[Any] | None = None
        score_s = 0.0
        if error is None:
            scoring = time.perf_counter()
            step, error = await self._score(env, task, result)
            score_s = time.perf_counter() - scoring
        if self.outcome is not None:
            self.outcome(result, step)
        timings = Timings(
            generate_s=episode.generate_s,
            env_s=max(0.0, program_s - episode.generate_s),
            score_s=score_s,
            total_s=time.perf_counter() - started,
        )
        return _trajectory(self.env_id, task, sample, episode, step, error, timings)

    async def _run(self, env: AgentProgramEnv, task: Task, key: str) -> Any:
        if env.command is None:
            return await env.run_program(task, self.endpoint.openai_client(key))
        async with self.loopback.origin() as origin:
            return await env.run_command(task, self.endpoint.base_url(key, origin))

    async def _score(
        self, env: AgentProgramEnv, task: Task, result: Any
    ) -> tuple[Step[Any] | None, EpisodeError | None]:
        limit_s = self.config.timeouts.env_step_s
        with anyio.move_on_after(math.inf if limit_s is None else limit_s):
            try:
                return await env.score(task, result), None
            except ProgramError as exc:
                return None, EpisodeError(cause="env_error", message=str(exc))
            except (Exception, SystemExit) as exc:
                message = f"reward: {described(exc)}{raised_at(exc)}"
                return None, EpisodeError(cause="score_error", message=message)
        return None, EpisodeError(
            cause="score_timeout", message=f"scoring the result took longer than {limit_s} s"
        )


def _trajectory(
    env_id: str,
    task: Task,
    sample: int,
    episode: EndpointEpisode,
    step: Step[Any] | None,
    error: EpisodeError | None,
    timings: Timings,
) -> Trajectory:
    tokens: list[int] = []
    loss_mask: list[int] = []
    logprobs: list[float] = []
    versions: list[int] = []
    starts: list[int] = []
    for segment in episode.segments:
        starts.append(len(tokens))
        tokens += segment.session.tokens
        loss_mask += segment.session.loss_mask
        logprobs += segment.session.logprobs
        versions += segment.session.policy_versions
    rewards = [] if step is None else [step.reward]
    return Trajectory(
        env=env_id,
        task_id=task.id,
        sample=sample,
        tokens=tokens,
        loss_mask=loss_mask,
        logprobs=logprobs,
        policy_versions=versions,
        step_rewards=rewards,
        reward=sum(rewards),
        score=None if step is None else step.score,
        terminated=error is None and not episode.truncated,
        truncated=error is None and episode.truncated,
        num_turns=len(episode.calls),
        error=error,
        timings=timings,
        extra_logs={**({} if step is None else step.extra_logs), "segments": len(starts)},
        finish_reasons=["length" if c.finish_reason == "length" else "stop" for c in episode.calls],
        segments=starts[1:],
    )
