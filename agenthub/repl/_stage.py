"""`Stage`: the REPL's one running episode, opened, stepped and closed with what each call
shows on the console; whatever the env raises is shown there and counted, never raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.text import Text

from agenthub._env import Env
from agenthub._errors import AgentHubError
from agenthub._types import Step, Task
from agenthub.agents import ChatTemplateError, ChatTokenizer
from agenthub.repl._episode import Action, EnvAttributeError, Episode
from agenthub.repl._render import (
    show_failure,
    show_observation,
    show_step,
    show_system_prompt,
    show_task,
    show_tools,
    to_json,
)

__all__ = ["Stage"]


class Stage:
    """Holds the episode the person is stepping (`episode`, None while none could be
    opened) and counts the entries that failed (`failures`: the env's errors, and those
    `Repl` adds)."""

    def __init__(
        self,
        *,
        env_id: str,
        make_env: Callable[[], Env[Any]],
        seed: int | None,
        chat: ChatTokenizer,
        chat_template: bool,
        console: Console,
    ) -> None:
        self.env_id = env_id
        self.make_env = make_env
        self.seed = seed
        self.chat = chat
        self.chat_template = chat_template
        self.console = console
        self.episode: Episode | None = None
        self.failures = 0

    async def new_episode(self, task: Task, task_index: int) -> bool:
        """Close the running episode, open one on `task` and show its start; False when the
        env's reset failed (shown)."""
        if self.episode is not None:
            await self.close()
        show_task(self.console, task, task_index, f"seed {self.seed}")
        episode = await self.open(task)
        if episode is None:
            return False
        show_system_prompt(self.console, task, episode.env.system_prompt)
        show_tools(self.console, episode.session.tools)
        show_observation(self.console, episode.first_observation)
        if episode.first_info:
            self.console.print(Text(f"info: {to_json(episode.first_info)}", style="dim"))
        return True

    async def open(self, task: Task) -> Episode | None:
        try:
            episode, took = await Episode.start(
                self.env_id, self.make_env, task, self.seed, self.chat, self.chat_template
            )
        except AgentHubError:
            raise
        except Exception as exc:
            if isinstance(exc, EnvAttributeError) and exc.__cause__ is not None:
                self.env_failed(exc.what, exc.__cause__)  # a property's bug, not reset's
            else:
                self.env_failed("reset", exc)
            self.console.print(Text("no episode now: fix the env, then :reset", style="bold"))
            return None
        self.episode = episode
        self.console.print(
            Text(f"(reset {took:.3f} s, {len(episode.session)} prompt tokens)", style="dim")
        )
        return episode

    async def step(self, action: Action, *, quiet: bool = False) -> Step[Any] | None:
        """Apply `action`; None when the env failed on it (shown; the episode is unchanged)."""
        episode = self.ready()
        try:
            step, took = await episode.apply(action)
        except ChatTemplateError:
            raise
        except Exception as exc:
            # The env is user code: whatever it raises is shown, and the REPL goes on.
            self.env_failed("step", exc)
            self.console.print(
                Text("the step was not applied: send another action, :undo or :reset", style="bold")
            )
            return None
        if not quiet:
            show_step(self.console, len(episode.actions), step, episode.total_return, took)
        return step

    def env_failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        show_failure(self.console, what, exc)

    async def close(self) -> None:
        assert self.episode is not None
        episode, self.episode = self.episode, None
        try:
            await episode.aclose()
        except Exception as exc:
            self.env_failed("aclose", exc)

    def live(self) -> Episode:
        if self.episode is None:
            raise AgentHubError(
                "no episode is running (its reset failed): fix the env, then :reset"
            )
        return self.episode

    def ready(self) -> Episode:
        """The running episode, if it can take an action."""
        episode = self.live()
        if episode.done:
            raise AgentHubError("the episode is over: :save FILE, :undo, :reset or :quit")
        if episode.stuck:
            raise AgentHubError(f"{episode.stuck}: :undo or :reset")
        return episode
