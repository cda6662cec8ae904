"""One episode played by hand: the env, its token-in-token-out session and what was done."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from agenthub._env import Env
from agenthub._returns import (
    EnvReturnError,
    checked_reset,
    checked_step,
    checked_stop,
    checked_system_prompt,
    checked_tools,
)
from agenthub._transcript import stepping
from agenthub._types import Observation, Step, Task
from agenthub.agents import (
    ChatTemplateError,
    ChatTokenizer,
    Generation,
    SamplingParams,
    Session,
    Timings,
    Trajectory,
)

__all__ = ["Action", "EnvAttributeError", "Episode", "TokenKind", "typed_action"]

T = TypeVar("T")

TokenKind = Literal["prompt", "env", "model", "human"]
"""Where a token came from: the opening prompt, a later env message, a model sample (loss mask
1), or text a person typed (loss mask 0: the model did not sample it)."""


class EnvAttributeError(Exception):
    """Reading `what`, an attribute of the env read after `reset` (`tools`, `stop`,
    `system_prompt`), raised: a property's bug, not `reset`'s. The cause is what it raised."""

    def __init__(self, what: str) -> None:
        super().__init__(f"reading the env's {what} raised")
        self.what = what


def _attribute(env: Env[Any], what: str, checked: Callable[[Env[Any]], T]) -> T:
    try:
        return checked(env)
    except EnvReturnError:
        raise
    except Exception as exc:
        raise EnvAttributeError(what) from exc


@dataclass(frozen=True, slots=True)
class Action:
    """One reply sent to the env: its tokens as they enter the session and the text the env
    gets (the decoded tokens, exactly what a model's reply would give)."""

    kind: Literal["human", "model"]
    text: str
    generation: Generation


def end_of_turn(chat: ChatTokenizer) -> list[int]:
    """The token a model ends its reply with: the template's end-of-turn token, else EOS."""
    if chat.closing_ids and chat.closing_ids[0] in chat.stop_token_ids:
        return [chat.closing_ids[0]]
    return list(chat.stop_token_ids[:1])


def reply_end(chat: ChatTokenizer, ids: Sequence[int], sampling: SamplingParams) -> int | None:
    """How many of `ids` a model sampling them under `sampling` would have written before the
    engine ended its reply: through the first stop token, or through the token that completes
    one of the `stop` strings (kept as sampled). None when the reply would go on."""
    stop_ids = {*sampling.stop_token_ids, *chat.stop_token_ids}
    at_token = next((i + 1 for i, token in enumerate(ids) if token in stop_ids), None)
    limit = len(ids) if at_token is None else at_token

    # A prefix that holds a stop string, its longer ones do too: decoding more tokens only
    # extends the text (true of byte-level BPE, whose partial characters only trail it).
    def has_stop(n: int) -> bool:
        text = chat.decode(ids[:n])
        return any(s in text for s in sampling.stop)

    if not (sampling.stop and has_stop(limit)):
        return at_token
    # The shortest prefix holding a stop string, in a few decodes rather than one per token
    # (a reasoning reply replayed runs to thousands of tokens).
    low, high = 1, limit
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if has_stop(middle) else (middle + 1, high)
    return low


def typed_action(
    chat: ChatTokenizer, text: str, policy_version: int, sampling: SamplingParams | None = None
) -> Action:
    """A person's reply, tokenized as if the model had written it under `sampling` (what `:gen`
    samples with): the text, then end-of-turn. A reply that reaches a stop string or token
    ends there, as the engine ends a sample: it is cut after the token that completes it and
    gets no end-of-turn token, so the episode holds what eval and training would hold."""
    ids = chat.encode_text(text)
    end = reply_end(chat, ids, sampling or SamplingParams())
    reply = (*ids[:end],) if end is not None else (*ids, *end_of_turn(chat))
    generation = Generation(reply, (0.0,) * len(reply), "stop", policy_version)
    return Action("human", chat.decode(reply), generation)


def model_action(chat: ChatTokenizer, generation: Generation) -> Action:
    return Action("model", chat.decode(generation.token_ids), generation)


@dataclass
class Episode:
    """The live episode: `env` after `reset(task, seed=seed)` and every applied action.

    `kinds` runs beside `session.tokens`. A typed action enters the session like a sample but
    with loss mask 0 and logprob 0.0, so `trajectory()` is exactly what the trainer would get
    had the model written it, without training on text the model never sampled.
    """

    env_id: str
    env: Env[Any]
    task: Task
    seed: int | None
    session: Session
    first_observation: Observation
    first_info: dict[str, Any]
    kinds: list[TokenKind] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    steps: list[Step[Any]] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    stop: tuple[str, ...] = ()
    """The env's stop strings, read after `reset`; a model's reply ends at them."""
    stuck: str | None = None
    """Why the episode cannot go on although the env took the last step (its answer could not
    be tokenized); `:undo` replays the episode without that step."""

    @classmethod
    async def start(
        cls,
        env_id: str,
        make_env: Callable[[], Env[Any]],
        task: Task,
        seed: int | None,
        chat: ChatTokenizer,
        chat_template: bool = True,
    ) -> tuple[Episode, float]:
        """Build a fresh env and reset it; return the episode and the seconds `reset` took.
        The env is closed again when `reset` fails."""
        env = make_env()
        started = time.perf_counter()
        try:
            observation, info = checked_reset(await env.reset(task, seed=seed))
            took = time.perf_counter() - started
            tools = _attribute(env, "tools", checked_tools)
            stop = _attribute(env, "stop", checked_stop)
            system_prompt = _attribute(env, "system_prompt", checked_system_prompt)
            session = Session.start(
                chat,
                task,
                observation,
                chat_template=chat_template,
                tools=tools,
                system_prompt=system_prompt,
            )
        except BaseException:
            await env.aclose()
            raise
        episode = cls(env_id, env, task, seed, session, observation, dict(info), stop=stop)
        episode.kinds = ["prompt"] * len(session)
        episode.timings.env_s += took
        return episode, took

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].done

    @property
    def total_return(self) -> float:
        return sum(s.reward for s in self.steps)

    async def apply(self, action: Action) -> tuple[Step[Any], float]:
        """Append the action's tokens, step the env, append its answer; return the step and
        the seconds `step` took. When the env raises, the action's tokens are taken out again,
        so the person can send another one."""
        session = self.session
        before = len(session)
        session.add_generation(action.generation)
        if action.kind == "human":
            n = len(action.generation.token_ids)
            session.loss_mask[before:] = [0] * n
            session.generated_tokens -= n
        started = time.perf_counter()
        try:
            with stepping(session.transcript()):
                step = checked_step(await self.env.step(action.text))
        except BaseException:
            session.rollback(before)
            raise
        finally:
            self.timings.env_s += time.perf_counter() - started
        took = time.perf_counter() - started
        self.kinds += [action.kind] * (len(session) - before)
        self.actions.append(action)
        self.steps.append(step)
        if not step.done:
            mark = len(session)
            try:
                session.add_observation(step.observation, action.generation.policy_version)
            except ChatTemplateError as exc:
                self.stuck = f"the env's answer to step {len(self.steps)} cannot be tokenized"
                raise ChatTemplateError(
                    f"{exc}. The env took the step (reward {step.reward:g}), but its answer is not "
                    "in the token stream: :undo replays the episode without it, :reset starts over"
                ) from exc
            self.kinds += ["env"] * (len(session) - mark)
        return step, took

    def trajectory(self) -> Trajectory:
        """The episode so far in the format `agenthub eval` and the trainer use."""
        session = self.session
        scores = [s.score for s in self.steps if s.score is not None]
        logs: dict[str, float] = {}
        for step in self.steps:
            logs.update(step.extra_logs)
        last = self.steps[-1] if self.steps else None
        return Trajectory(
            env=self.env_id,
            task_id=self.task.id,
            tokens=list(session.tokens),
            loss_mask=list(session.loss_mask),
            logprobs=list(session.logprobs),
            policy_versions=list(session.policy_versions),
            step_rewards=[s.reward for s in self.steps],
            reward=self.total_return,
            score=scores[-1] if scores else None,
            terminated=bool(last and last.terminated),
            truncated=bool(last and last.truncated),
            num_turns=len(self.actions),
            timings=self.timings.model_copy(
                update={"total_s": self.timings.env_s + self.timings.generate_s}
            ),
            extra_logs=logs,
        )

    async def aclose(self) -> None:
        await self.env.aclose()
