"""`AgentProgramEnv`: an agent program with its own loop, trained through an OpenAI endpoint."""

from __future__ import annotations

import importlib
import inspect
import shlex
from collections.abc import Callable, Iterable
from typing import Any

import anyio

from agenthub._env import Env
from agenthub._errors import AgentHubError
from agenthub._registry import make
from agenthub._tracebacks import described, raised_at
from agenthub._types import Message, Step, Task
from agenthub.envs.agent_program._command import describe_failure, run_command

__all__ = ["AgentProgramEnv", "ProgramError"]


class ProgramError(AgentHubError):
    """The agent program failed its episode: it raised, overran its budget, or returned a
    result the reward cannot read. The episode runner records it as `env_error`."""


class AgentProgramEnv(Env[list[Message]]):
    """An agent program that runs its own loop: `program="package.module:function"`, where

        async def agent(client: openai.AsyncOpenAI, task: Task) -> Any

    calls the model through `client` as often as it likes (chat completions with or without
    `tools`, text completions) and returns its result. The episode's reward is
    `reward="package.module:function"`, called as `reward(task, result)` (sync or async, a
    number), or comes from a registered single-turn env given as `verifier=` (with
    `verifier_kwargs`): its episode on the task is stepped once with the result as the reply
    (`verifier="code_exec", verifier_kwargs={"max_turns": 1}` runs the returned code against
    the task's tests). Tasks come from the verifier's `tasks` or from a task file.

    Or `command="python my_agent.py"` (split like a shell would, but run without one): a
    program in any language, run as a subprocess per episode with `OPENAI_BASE_URL` (that
    episode's base URL on a loopback HTTP server) and `OPENAI_API_KEY` set, the task as JSON
    (`Task.model_dump_json`) on its stdin; its result is its stdout, stripped. A non-zero exit
    or a budget overrun (its process group is killed) is an `env_error` with the tail of its
    stderr.

    How it plugs in: the episode runner owns the engine, so it plays this env itself instead
    of calling `reset` and `step` (which refuse). For each episode it opens an episode on its
    OpenAI-compatible endpoint (`agenthub.agents.OpenAIEndpoint`), hands `run_program` an
    `openai.AsyncOpenAI` client whose base URL names that episode, and builds the trajectory
    from the exact tokens the endpoint recorded, then asks `score` for the reward. A program
    that raises, runs past `budget_s` seconds, or makes no call fails its episode with an
    `env_error` saying so, never a silent zero.
    """

    def __init__(
        self,
        *,
        program: str | None = None,
        command: str | None = None,
        reward: str | None = None,
        verifier: str | None = None,
        verifier_kwargs: dict[str, Any] | None = None,
        budget_s: float = 600.0,
    ) -> None:
        if (reward is None) == (verifier is None):
            raise ValueError(
                "agent_program scores the program's result with reward=package.module:function "
                "or verifier=ENV_ID (a registered env such as code_exec or math): give one"
            )
        if budget_s <= 0:
            raise ValueError(f"budget_s must be positive, got {budget_s}")
        if (program is None) == (command is None):
            raise ValueError(
                "agent_program runs program=package.module:function (an `async def agent("
                'client, task)`) or command="python my_agent.py" (a subprocess): give one'
            )
        self.program: Callable[..., Any] | None = None
        self.command: list[str] | None = None
        if command is not None:
            self.command = shlex.split(command)
            if not self.command:
                raise ValueError('command= is empty; give the program to run, e.g. "python a.py"')
        else:
            assert program is not None
            self.program = _load(program, "program")
            if not inspect.iscoroutinefunction(self.program):
                raise ValueError(
                    f"program {program!r} must be `async def agent(client, task)`, got a "
                    f"{type(self.program).__name__} that is not a coroutine function"
                )
        self.reward = None if reward is None else _load(reward, "reward")
        self.verifier = verifier
        self.verifier_kwargs = dict(verifier_kwargs or {})
        self.budget_s = budget_s

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        raise _not_stepped()

    async def step(self, action: str) -> Step[list[Message]]:
        raise _not_stepped()

    def tasks(self, split: str = "train") -> Iterable[Task]:
        if self.verifier is None:
            return super().tasks(split)
        return make(self.verifier, **self.verifier_kwargs).tasks(split)

    async def run_program(self, task: Task, client: Any) -> Any:
        """Run the program on `task` with `client`; its result, or `ProgramError` saying why
        there is none."""
        assert self.program is not None, "a command= program runs with run_command"
        with anyio.move_on_after(self.budget_s) as scope:
            try:
                return await self.program(client, task)
            except (Exception, SystemExit) as exc:
                raise ProgramError(
                    f"the agent program raised {described(exc)}{raised_at(exc)}"
                ) from exc
        assert scope.cancelled_caught
        raise ProgramError(
            f"the agent program ran past its budget of {self.budget_s} s (budget_s) and was "
            "cancelled; give it a larger budget_s or make it finish sooner"
        )

    async def run_command(self, task: Task, base_url: str) -> str:
        """Run the command on `task` against `base_url`; its stdout stripped, or
        `ProgramError` saying why there is none."""
        assert self.command is not None, "a program= program runs with run_program"
        try:
            status, out, err = await run_command(
                self.command, task.model_dump_json(), base_url, self.budget_s
            )
        except OSError as exc:
            raise ProgramError(
                f"cannot start the agent command {self.command!r} ({described(exc)}); is it "
                "installed and on PATH?"
            ) from exc
        if status != 0:
            raise ProgramError(describe_failure(self.command, status, self.budget_s, err))
        return out.strip()

    async def score(self, task: Task, result: Any) -> Step[list[Message]]:
        """The episode's reward for the program's `result`: `reward(task, result)`, or one
        step of the verifier env with the result as the reply."""
        if self.reward is not None:
            value = self.reward(task, result)
            if inspect.isawaitable(value):
                value = await value
            return Step([], reward=value, terminated=True)
        if not isinstance(result, str):
            raise ProgramError(
                f"the agent program returned {type(result).__name__}, but verifier "
                f"{self.verifier!r} grades a reply: return the final answer as a str"
            )
        assert self.verifier is not None
        env = make(self.verifier, **self.verifier_kwargs)
        try:
            await env.reset(task)
            step = await env.step(result)
        finally:
            await env.aclose()
        if not step.done:
            raise ProgramError(
                f"verifier {self.verifier!r} wants another turn after grading the result; "
                'make it single-turn with verifier_kwargs (code_exec: {"max_turns": 1})'
            )
        return Step([], step.reward, True, False, step.info, step.score, step.extra_logs)


def _load(path: str, what: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{what}={path!r} must name a function as package.module:function")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"{what}={path!r}: cannot import {module_name!r} ({described(exc)}); is it "
            "installed, or on PYTHONPATH?"
        ) from exc
    for part in attr.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise ValueError(f"{what}={path!r}: {module_name} has no function {attr!r}")
    return found  # type: ignore[no-any-return]


def _not_stepped() -> ProgramError:
    return ProgramError(
        "agent_program episodes are played by agenthub's episode runner, which hands the "
        "program an OpenAI endpoint; reset and step are not used (run it with `agenthub "
        "train`, `agenthub eval` or `agenthub repl`, whose :gen plays an episode)"
    )
