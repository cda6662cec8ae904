"""`Repl`: the REPL's logic, driven by entries and writing to a rich `Console`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.text import Text

from agenthub._env import Env
from agenthub._errors import AgentHubError
from agenthub._registry import make
from agenthub.agents import ChatTokenizer, EngineError, InferenceEngine, SamplingParams
from agenthub.repl._episode import Episode, model_action, typed_action
from agenthub.repl._files import append_line, read_line
from agenthub.repl._input import (
    ENTRY_HELP,
    Command,
    Enter,
    Entry,
    EntryReader,
    TypedAction,
    parse_setting,
)
from agenthub.repl._program import ProgramStage, program_of
from agenthub.repl._render import (
    show_failure,
    show_generation,
    show_help,
    show_saved,
    show_settings,
    show_tokens,
    show_undone,
)
from agenthub.repl._replay import Replay
from agenthub.repl._stage import Stage
from agenthub.repl._tasks import TaskSource

__all__ = ["EngineFactory", "Repl", "probe_env"]

EngineFactory = Callable[[], Awaitable[InferenceEngine]]


async def probe_env(env_id: str, env_kwargs: dict[str, Any]) -> str | None:
    """Build `env_id`'s env once and close it, so that a wrong id or argument fails at once
    (the CLI calls it before loading a model, too). Returns the agent program that plays its
    episodes, where one does (`ProgramStage`)."""
    probe = make(env_id, **env_kwargs)
    try:
        return program_of(probe)
    finally:
        await probe.aclose()


class Repl:
    """Step through one environment by hand, or let a model write the actions.

    Feed it entries (`handle`) or lines (`feed`); everything it shows goes to `console`. An
    exception the env raises is shown with its traceback and the episode stays as it was
    before the failing call. The engine is built by `engine_factory` on the first `:gen`.
    On an agent program's env, `program` takes the commands that work otherwise there.
    """

    def __init__(
        self,
        *,
        env: str,
        env_kwargs: dict[str, Any],
        task_index: int,
        seed: int | None,
        chat: ChatTokenizer,
        sampling: SamplingParams,
        console: Console,
        engine_factory: EngineFactory | None = None,
        tasks_file: str | None = None,
        split: str = "held_out",
        chat_template: bool = True,
    ) -> None:
        self.env_id = env
        self.env_kwargs = env_kwargs
        self.tasks = TaskSource(
            self.make_env, tasks_file=tasks_file, split=split, env_kwargs=env_kwargs
        )
        self.task_index = task_index
        self.chat = chat
        self.sampling = sampling
        self.console = console
        self._engine_factory = engine_factory
        self.engine: InferenceEngine | None = None
        self.stage = Stage(
            env_id=env,
            make_env=self.make_env,
            seed=seed,
            chat=chat,
            chat_template=chat_template,
            console=console,
        )
        self.replay: Replay | None = None
        self.program: ProgramStage | None = None
        self._reader = EntryReader()

    @property
    def episode(self) -> Episode | None:
        """The episode being stepped (None while none could be opened)."""
        return self.stage.episode

    @property
    def failures(self) -> int:
        """How many entries ended in an error (a piped session exits non-zero if any did)."""
        return self.stage.failures

    def make_env(self) -> Env[Any]:
        return make(self.env_id, **self.env_kwargs)

    async def start(self) -> None:
        """Check the env can be built (so a bad id fails at once) and open the first episode."""
        program = await probe_env(self.env_id, self.env_kwargs)
        self.console.print(Text(ENTRY_HELP + " :help lists the commands.", style="dim"))
        if program is None:
            await self.stage.new_episode(await self.tasks.get(self.task_index), self.task_index)
            return
        self.program = ProgramStage(
            program, self.stage, self.tasks, self._engine, lambda: self.sampling
        )
        await self.program.open(self.task_index)

    @property
    def prompt(self) -> str:
        if self._reader.continuing:
            return self._reader.continuation_prompt
        if self.program is not None:
            return self.program.prompt
        if self.replay is not None and self.episode is not None:
            return f"replay step {len(self.episode.actions) + 1} (Enter)> "
        if self.episode is None:
            return "repl> "
        return f"{self.env_id} {len(self.episode.actions) + 1}> "

    async def feed(self, line: str) -> bool:
        """Take one typed line; return False once the person asked to quit."""
        entry = self._reader.feed(line)
        return True if entry is None else await self.handle(entry)

    @property
    def typing(self) -> bool:
        """Whether an action is half typed (the next line continues it)."""
        return self._reader.continuing

    def cancel_input(self) -> None:
        self._reader.cancel()

    async def handle(self, entry: Entry) -> bool:
        """Carry out one entry; return False when it was `:quit`."""
        try:
            if isinstance(entry, Command):
                return await self._command(entry)
            if isinstance(entry, TypedAction):
                await self._typed(entry.text)
            elif isinstance(entry, Enter) and self.replay is not None:
                await self._replay_step()
        except AgentHubError as exc:
            self.stage.failures += 1
            self.console.print(Text(f"error: {exc}", style="bold red"))
        return True

    async def aclose(self) -> None:
        if self.episode is not None:
            await self.stage.close()
        if self.engine is not None:
            await self.engine.aclose()
            self.engine = None

    # -- commands -------------------------------------------------------------------------

    async def _command(self, command: Command) -> bool:
        name, args = command.name, command.args
        if name in ("quit", "q", "exit"):
            return False
        handlers: dict[str, Callable[[tuple[str, ...]], Awaitable[None]]] = {
            "gen": self._gen,
            "set": self._set,
            "tokens": self._tokens,
            "reset": self._reset,
            "undo": self._undo,
            "save": self._save,
            "load": self._load,
            "stop": self._stop,
            "help": self._help,
        }
        if self.program is not None:
            handlers.update(self.program.handlers())
        if name not in handlers:
            raise AgentHubError(f"unknown command :{name}; :help lists the commands")
        await handlers[name](args)
        return True

    async def _help(self, args: tuple[str, ...]) -> None:
        show_help(self.console)

    async def _set(self, args: tuple[str, ...]) -> None:
        if args:
            self.sampling = parse_setting(self.sampling, args)
        show_settings(self.console, self.sampling)

    async def _tokens(self, args: tuple[str, ...]) -> None:
        show_tokens(self.console, self.stage.live(), self.chat, ids="ids" in args)

    async def _reset(self, args: tuple[str, ...]) -> None:
        index = self.task_index
        if args:
            try:
                index = int(args[0])
            except ValueError as exc:
                raise AgentHubError(f":reset N needs a task number, got {args[0]!r}") from exc
        task = await self.tasks.get(index)  # a task that is not there leaves the current one
        self.task_index = index
        self.replay = None
        await self.stage.new_episode(task, self.task_index)

    async def _undo(self, args: tuple[str, ...]) -> None:
        episode = self.stage.live()
        if not episode.actions:
            raise AgentHubError("nothing to undo: no step was taken yet")
        keep, old = episode.actions[:-1], list(episode.session.tokens)
        started = time.perf_counter()
        await self.stage.close()
        fresh = await self.stage.open(episode.task)
        if fresh is None:
            return
        for action in keep:
            if await self.stage.step(action, quiet=True) is None:
                return
        same = old[: len(fresh.session)] == fresh.session.tokens
        show_undone(self.console, fresh, len(keep), time.perf_counter() - started, same)

    async def _save(self, args: tuple[str, ...]) -> None:
        if len(args) != 1:
            raise AgentHubError(":save FILE")
        trajectory = self.stage.live().trajectory()
        path, line = append_line(args[0], trajectory.model_dump_json())
        show_saved(self.console, path, line, trajectory)

    async def _load(self, args: tuple[str, ...]) -> None:
        if len(args) not in (1, 2):
            raise AgentHubError(":load FILE [LINE]")
        saved, line = read_line(args[0], args[1] if len(args) == 2 else None)
        if saved.env != self.env_id:
            self.console.print(
                Text(
                    f"note: saved on env {saved.env!r}, replaying on {self.env_id!r}",
                    style="yellow",
                )
            )
        task = await self.tasks.find(saved.task_id)
        if task is None:
            raise AgentHubError(
                f"task {saved.task_id!r} of the saved trajectory is not in "
                f"{self.tasks.describe()} or the env's other split; pass --tasks FILE with it"
            )
        self.console.print(
            Text(
                f"loaded line {line} of {args[0]}: task {saved.task_id}, {saved.num_turns} steps, "
                f"return {saved.reward:g}. Enter replays the next step; :stop ends the replay.",
                style="bold",
            ),
            markup=False,
        )
        self.replay = None
        if await self.stage.new_episode(task, self.task_index):
            self.replay = Replay(saved, self.chat)

    async def _stop(self, args: tuple[str, ...]) -> None:
        if self.replay is None:
            raise AgentHubError("no replay is running")
        self.replay = None
        self.console.print(Text("replay stopped; go on by hand"))

    # -- actions --------------------------------------------------------------------------

    async def _typed(self, text: str) -> None:
        if self.program is not None:
            raise self.program.cannot_type()
        sampling = self._reply_sampling(self.stage.ready())
        action = typed_action(self.chat, text, self._policy_version(), sampling)
        if action.text != text:
            why = ""
            if any(s in text for s in sampling.stop):
                why = " (a reply ends at its first stop string, as a sampled one does)"
            note = f"note: the tokens decode to {action.text!r}{why}; the env gets that"
            self.console.print(Text(note, style="yellow"), markup=False)
        await self.stage.step(action)

    async def _gen(self, args: tuple[str, ...]) -> None:
        episode = self.stage.ready()
        engine = await self._engine()
        room = engine.max_model_len - len(episode.session)
        if room < 1:
            raise AgentHubError(
                f"the episode fills the model's context ({engine.max_model_len} tokens)"
            )
        sampling = self._reply_sampling(episode)
        sampling = sampling.replace(max_tokens=min(sampling.max_tokens, room))
        show_settings(self.console, self.sampling)
        started = time.perf_counter()
        try:
            generation = await engine.generate(episode.session.tokens, sampling)
        except EngineError as exc:
            raise AgentHubError(f"generation_error: {exc}") from exc
        finally:
            episode.timings.generate_s += time.perf_counter() - started
        took = time.perf_counter() - started
        action = model_action(self.chat, generation)
        show_generation(self.console, generation, action.text, took)
        await self.stage.step(action)

    async def _replay_step(self) -> None:
        replay = self.replay
        assert replay is not None
        episode = self.stage.ready()
        action = replay.next_action(episode, self._reply_sampling(episode))
        if action is None:
            self._finish_replay()
            return
        who = "model" if action.kind == "model" else "typed"
        self.console.print(Text(f"replaying a {who} action:", style="bold"))
        self.console.print(Text(action.text), markup=False)
        step = await self.stage.step(action)
        if step is not None and (episode.done or len(episode.session) >= len(replay.saved.tokens)):
            self._finish_replay()

    def _finish_replay(self) -> None:
        assert self.replay is not None and self.episode is not None
        replay, self.replay = self.replay, None
        self.console.print(Text(replay.outcome(self.episode), style="bold"))

    def _policy_version(self) -> int:
        return 0 if self.engine is None else self.engine.policy_version

    def _reply_sampling(self, episode: Episode) -> SamplingParams:
        """What `:gen` samples under, as `agenthub eval` would: the session's settings, the
        env's stop strings and every stop token. A typed or replayed reply ends by the same."""
        stops = {*self.sampling.stop_token_ids, *self.chat.stop_token_ids}
        return self.sampling.with_stop(episode.stop).replace(stop_token_ids=tuple(sorted(stops)))

    async def _engine(self) -> InferenceEngine:
        if self.engine is None:
            if self._engine_factory is None:
                raise AgentHubError("no model to generate with")
            self.engine = await start_engine(self.console, self._engine_factory)
        return self.engine


async def start_engine(console: Console, factory: EngineFactory) -> InferenceEngine:
    """The engine `factory` makes, with what its start takes shown on `console`."""
    console.print(
        Text(
            "loading the model for :gen (vLLM in this process; takes 30-60 s on CPU)...",
            style="bold",
        )
    )
    started = time.perf_counter()
    try:
        engine = await factory()
    except Exception as exc:
        show_failure(console, "starting the model", exc, cause="generation_error")
        raise AgentHubError("the model could not be started (see above)") from exc
    console.print(Text(f"model ready in {time.perf_counter() - started:.1f} s", style="bold"))
    return engine
