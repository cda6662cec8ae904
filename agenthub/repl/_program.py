"""`ProgramStage`: the REPL on an `agent_program` env, whose episodes its program plays."""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from rich.text import Text

from agenthub._env import Env
from agenthub._errors import AgentHubError
from agenthub._types import Step, Task
from agenthub.agents import (
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Trajectory,
)
from agenthub.agents._program import ProgramPlayer
from agenthub.envs.agent_program import AgentProgramEnv
from agenthub.repl._episode import TokenKind
from agenthub.repl._files import append_line
from agenthub.repl._program_calls import ShownCalls
from agenthub.repl._render import (
    LEGEND,
    counted,
    show_help,
    show_legend,
    show_saved,
    show_settings,
    show_task,
    show_token_stream,
    to_json,
)
from agenthub.repl._stage import Stage
from agenthub.repl._tasks import TaskSource

__all__ = ["ProgramStage", "program_of"]

Handler = Callable[[tuple[str, ...]], Awaitable[None]]

PROGRAM_LEGEND: dict[TokenKind, str] = {
    "prompt": "a segment's opening prompt (mask 0)",
    "env": "what the program added between calls (mask 0)",
    "model": LEGEND["model"],
}


def program_of(env: Env[Any]) -> str | None:
    """The agent program that plays `env`'s episodes, as the person gave it (None when the
    env is stepped with replies instead)."""
    unwrapped = env.unwrapped
    if not isinstance(unwrapped, AgentProgramEnv):
        return None
    if unwrapped.command is not None:
        return shlex.join(unwrapped.command)
    assert unwrapped.program is not None
    return f"{unwrapped.program.__module__}:{unwrapped.program.__qualname__}"


class ProgramStage:
    """The REPL on an agent program's env. The program owns the loop, so nobody steps the
    episode: the person picks the task, and `:gen` plays one whole episode, the program
    against the REPL's model through the same endpoint `agenthub train` and `eval` use. Each
    call is shown as it is served, then the reward, or the episode's typed error (a program
    that raised, ran past its budget or made no call); the REPL goes on either way. The last
    episode played is kept for `:tokens` and `:save`; `:gen` again plays a fresh one.
    """

    def __init__(
        self,
        program: str,
        stage: Stage,
        tasks: TaskSource,
        engine: Callable[[], Awaitable[InferenceEngine]],
        sampling: Callable[[], SamplingParams],
    ) -> None:
        self.program = program
        self.stage = stage  # its env, tokenizer and console, and the count of failed entries
        self.env_id = stage.env_id
        self.chat = stage.chat
        self.console = stage.console
        self.tasks = tasks
        self._engine = engine
        self._sampling = sampling
        self.task: Task | None = None
        self.index = 0
        self.trajectory: Trajectory | None = None
        self.result: Any = None  # what the last episode's program returned
        self.info: dict[str, Any] = {}  # the verifier's (or reward's) info on that result

    @property
    def prompt(self) -> str:
        return f"{self.env_id} :gen> "

    def handlers(self) -> dict[str, Handler]:
        """The commands that work otherwise on a program's env than on a stepped one."""
        return {
            "gen": self._gen,
            "tokens": self._tokens,
            "reset": self._reset,
            "save": self._save,
            "undo": self._no_steps,
            "load": self._no_steps,
            "help": self._help,
        }

    async def open(self, index: int) -> None:
        """Take task `index` and say how an episode of it is played."""
        self.task = await self.tasks.get(index)  # a task that is not there leaves the current one
        self.index, self.trajectory = index, None
        show_task(self.console, self.task, index, self._seeding())
        self.console.print(Text(self._how(), style="bold"), markup=False)

    def cannot_type(self) -> AgentHubError:
        return AgentHubError(
            f"{self.env_id}'s episodes are played by its program ({self.program}), which "
            "writes every request itself: there is no action to type. :gen runs the program "
            "against the model; :reset N picks another task"
        )

    async def _gen(self, args: tuple[str, ...]) -> None:
        assert self.task is not None
        engine = await self._engine()
        sampling = self._sampling()
        show_settings(self.console, sampling)
        shown = ShownCalls(engine, self.chat, self.console)
        config = RolloutConfig(sampling=sampling, concurrency=1)
        self.result, self.info = None, {}
        player = ProgramPlayer(
            shown, self.chat, config, self.env_id, watch=shown.watch, outcome=self._scored
        )
        env = self.stage.make_env()
        try:
            assert isinstance(env.unwrapped, AgentProgramEnv)
            trajectory = await player.play(env.unwrapped, self.task, 0, sampling.seed)
        finally:
            with anyio.CancelScope(shield=True):
                await player.endpoint.aclose()
                await self._close(env)
        self.trajectory = trajectory
        self._show_outcome(trajectory)

    def _scored(self, result: Any, step: Step[Any] | None) -> None:
        self.result, self.info = result, {} if step is None else dict(step.info)

    async def _close(self, env: Env[Any]) -> None:
        try:
            await env.aclose()
        except Exception as exc:
            self.stage.env_failed("aclose", exc)

    def _show_outcome(self, t: Trajectory) -> None:
        segments = len(t.segments) + 1 if t.tokens else 0
        calls = f"{counted(t.num_turns, 'call')} in {counted(segments, 'segment')}"
        if t.error is not None:
            self.stage.failures += 1
            self.console.print(Text(f"{t.error.cause}: {t.error.message}", style="bold red"))
            self._show_result()
            self.console.print(
                Text(
                    f"the episode failed after {calls}, as train and eval would record it (no "
                    "reward): :gen plays it again, :tokens shows what was sampled",
                    style="bold",
                ),
                markup=False,
            )
            return
        head = Text(f"── episode over: reward {t.reward:g}", style="bold")
        if t.score is not None:
            head.append(f"  score {t.score:g}")
        head.append(f"  {calls}  terminated {t.terminated}  truncated {t.truncated}")
        timings = t.timings
        head.append(
            f"  (generate {timings.generate_s:.3f} s, the program's own {timings.env_s:.3f} s, "
            f"score {timings.score_s:.3f} s)",
            style="dim",
        )
        self.console.print(head, markup=False)
        self._show_result()
        if self.info:
            self.console.print(Text(f"info: {to_json(self.info)}", style="dim"), markup=False)
        logs = {k: v for k, v in t.extra_logs.items() if k != "segments"}
        if logs:
            self.console.print(Text(f"extra_logs: {to_json(logs)}", style="dim"), markup=False)
        self.console.print(
            Text(":tokens shows it, :save FILE keeps it, :gen plays another", style="bold"),
            markup=False,
        )

    def _show_result(self) -> None:
        """What the program returned, the result its reward or verifier graded; nothing when it
        returned None or failed before returning."""
        if self.result is None:
            return
        result = self.result
        text = result if isinstance(result, str) else json.dumps(result, default=repr)
        self.console.print(Text("the program returned:", style="bold"), markup=False)
        self.console.print(Text(text[-2000:]), markup=False)

    async def _tokens(self, args: tuple[str, ...]) -> None:
        t = self._played()
        starts = [0, *t.segments, len(t.tokens)]
        kinds = token_kinds(t)
        show_legend(self.console, kinds, PROGRAM_LEGEND)
        for n, (start, end) in enumerate(itertools.pairwise(starts)):
            if len(starts) > 2:
                self.console.print(Text(f"── segment {n + 1} of {len(starts) - 1}", style="bold"))
            show_token_stream(
                self.console,
                self.chat,
                t.tokens[start:end],
                t.loss_mask[start:end],
                t.logprobs[start:end],
                kinds[start:end],
                "ids" in args,
            )

    async def _reset(self, args: tuple[str, ...]) -> None:
        try:
            index = int(args[0]) if args else self.index
        except ValueError as exc:
            raise AgentHubError(f":reset N needs a task number, got {args[0]!r}") from exc
        await self.open(index)

    async def _save(self, args: tuple[str, ...]) -> None:
        if len(args) != 1:
            raise AgentHubError(":save FILE")
        trajectory = self._played()
        path, line = append_line(args[0], trajectory.model_dump_json())
        show_saved(self.console, path, line, trajectory, "call")

    async def _no_steps(self, args: tuple[str, ...]) -> None:
        raise AgentHubError(
            f"{self.env_id}'s program plays each episode whole, so there are no steps to take "
            "back or replay: :gen plays a fresh episode"
        )

    async def _help(self, args: tuple[str, ...]) -> None:
        show_help(self.console)
        self.console.print(Text(self._how(), style="bold"), markup=False)

    def _played(self) -> Trajectory:
        if self.trajectory is None:
            raise AgentHubError("no episode was played on this task yet: :gen runs the program")
        return self.trajectory

    def _seeding(self) -> str:
        """How the episodes' sampling is seeded: the program's env is never reset, so the REPL's
        reset seed plays no part; the sampling seed (`:set seed`) does, one more per call."""
        seed = self._sampling().seed
        if seed is None:
            return "unseeded: each :gen samples afresh; :set seed N repeats an episode"
        return f"sampling seed {seed}, one more for each later call of an episode"

    def _how(self) -> str:
        return (
            f"{self.env_id}: its program ({self.program}) plays the episode and calls the model "
            "itself, so you cannot type its actions. :gen plays one whole episode against the "
            "model, showing each call; :tokens and :save FILE then work on it"
        )


def token_kinds(t: Trajectory) -> list[TokenKind]:
    """Where each token came from: the model (mask 1), a segment's opening prompt, or what
    the program added between its calls."""
    kinds: list[TokenKind] = []
    opening = set([0, *t.segments])
    sampled = False
    for i, mask in enumerate(t.loss_mask):
        if i in opening:
            sampled = False
        if mask:
            sampled = True
        kinds.append("model" if mask else "env" if sampled else "prompt")
    return kinds
