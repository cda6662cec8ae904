"""The conformance checker for the `Env` contract."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np

from agenthub._env import Env
from agenthub._errors import AgentHubError, CheckEnvError, NoTaskSourceError, TaskFileError
from agenthub._registry import make
from agenthub._returns import (
    READ_AHEAD,
    READ_AHEAD_S,
    checked_stop,
    checked_system_prompt,
    checked_tasks,
    checked_tools,
    method_problems,
    reset_problems,
    step_problems,
    task_problem,
)
from agenthub._spec import EnvSpec
from agenthub._tracebacks import described, raised
from agenthub._types import Task
from agenthub._watchdog import loop_watchdog
from agenthub.testing._held import HeldClock

logger = logging.getLogger("agenthub.testing")

DEFAULT_ACTIONS: tuple[str, ...] = (
    "",
    "I think the answer is 42.",
    "```python\nprint('hello')\n```",
    "\\boxed{7}",
    "\x00\ufffd\U0001f600 not what you expected \n\n\t",
)
"""Replies a model might plausibly produce; any env must answer them without raising."""

_AWAIT_BLOCKING_WORK = (
    "run blocking or CPU-heavy work with `await anyio.to_thread.run_sync(...)` (or in a "
    "process), and talk to servers through an async client"
)
_READ_LAZILY = "yield tasks as they are read rather than loading the whole source first"
_READ_WITHOUT_HANGING = f"give its reads a timeout, and {_READ_LAZILY}"

EnvLike = Env[Any] | Callable[[], Env[Any]] | str


def check_env(
    env: EnvLike,
    *,
    tasks: Iterable[Task] | None = None,
    actions: Sequence[str] = DEFAULT_ACTIONS,
    seed: int = 0,
    max_steps: int = 32,
    timeout_s: float = 60.0,
    max_block_s: float = 0.25,
) -> None:
    """Check that `env` keeps the `agenthub.Env` contract; raise `CheckEnvError` if not.

    `env` is an instance, a zero-argument factory, or a registered id. The checker plays a few
    episodes with `actions` (cycled) on `tasks` (by default the env's first two `train`
    tasks), one of them opening with the task's answer where it has one (`metadata["reference"]`
    or a text or number `label`); an env with `tools` is first sent a reply calling each of them
    (arguments made from its schema) and one with a broken call. It checks: types of
    everything returned, JSON-serialisable tasks, observations, info and tools, that episodes
    end within `max_steps`, that the same seed and actions replay the same episode, that a
    cancelled `reset` or `step` leaves the env usable, that `aclose` is idempotent, that
    `env.spec` round-trips through JSON, and that no call blocks the event loop for more than
    `max_block_s` (training runs many episodes on one loop). Call it from a plain (sync) test;
    inside a running event loop use `acheck_env`.

    A block is timed as the code on the loop's thread holds it: the time that thread spends
    ready but waiting for a CPU (a loaded machine) and the garbage collector's passes on it are
    taken out (`agenthub.testing._held`, from Linux's per-thread scheduler counts), so a busy
    CI machine does not fail a correct env, while `time.sleep`, a synchronous call or CPU work
    in the env still counts in full. Elsewhere than Linux a block is timed on the wall clock.

    A call that blocks the event loop for longer than `timeout_s` (`time.sleep`, a synchronous
    HTTP call without a timeout, `input()`) cannot be interrupted: meanwhile a warning on the
    `agenthub.testing` logger (on stderr where logging is not set up) names the call and its
    line, and the check fails once the call returns.

    Unless `tasks` are given, it also reads on through each split the env offers (`train` and
    `held_out`; a split it does not offer raises `NoTaskSourceError`), the first 10,000 tasks
    of each (fewer where 5 s, or half of `timeout_s`, pass first: a generator may never end),
    as evaluation and training will read them. A task file of the env's own that cannot be
    read, at any of those lines, raises its `TaskFileError` (naming FILE:LINE): the data is
    wrong, not the env.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "check_env runs its own event loop, and this thread is already running one (a "
            "notebook, an async test): there, use `await agenthub.testing.acheck_env(env, ...)`"
        )
    anyio.run(
        lambda: acheck_env(
            env,
            tasks=tasks,
            actions=actions,
            seed=seed,
            max_steps=max_steps,
            timeout_s=timeout_s,
            max_block_s=max_block_s,
        )
    )


_ON_BLOCKED: contextvars.ContextVar[Callable[[CheckEnvError], None] | None] = (
    contextvars.ContextVar("agenthub_check_env_on_blocked", default=None)
)


@contextmanager
def on_blocked_loop(handler: Callable[[CheckEnvError], None]) -> Iterator[None]:
    """Within it, a check whose event loop an env's call blocks past `timeout_s` calls
    `handler(error)` (on a watchdog thread, while the call still blocks) instead of warning:
    `agenthub envs check` says so and ends the process, which nothing else could."""
    token = _ON_BLOCKED.set(handler)
    try:
        yield
    finally:
        _ON_BLOCKED.reset(token)


@dataclass(frozen=True)
class _Turn:
    observation: Any
    reward: float
    terminated: bool
    truncated: bool


async def acheck_env(
    env: EnvLike,
    *,
    tasks: Iterable[Task] | None = None,
    actions: Sequence[str] = DEFAULT_ACTIONS,
    seed: int = 0,
    max_steps: int = 32,
    timeout_s: float = 60.0,
    max_block_s: float = 0.25,
) -> None:
    """The async twin of `check_env`."""

    def warn(error: CheckEnvError) -> None:
        logger.warning("%s", error)

    stalled = _ON_BLOCKED.get() or warn
    await _acheck(env, tasks, actions, seed, max_steps, timeout_s, max_block_s, stalled=stalled)


class LoopBlockedError(CheckEnvError):
    """A call of the env has blocked the check's event loop past its `timeout_s`, and still
    blocks it."""


async def _acheck(
    env: EnvLike,
    tasks: Iterable[Task] | None,
    actions: Sequence[str],
    seed: int,
    max_steps: int,
    timeout_s: float,
    max_block_s: float,
    *,
    stalled: Callable[[CheckEnvError], None],
) -> None:
    if not timeout_s > 0 or not max_block_s > 0:
        raise ValueError(
            f"timeout_s ({timeout_s:g}) and max_block_s ({max_block_s:g}) must be above 0"
        )
    instance = make(env) if isinstance(env, str) else env if isinstance(env, Env) else env()
    checker = _Checker(instance, list(actions), max_steps, timeout_s, max_block_s)

    def blocked(quiet_s: float, where: str) -> None:
        stalled(LoopBlockedError(str(instance), [checker.blocking(quiet_s, where)]))

    try:
        async with loop_watchdog(after_s=timeout_s, stalled=blocked, log=logger):
            await checker.run(seed, tasks)
    finally:
        if not checker.closed and isinstance(instance, Env):
            with anyio.CancelScope(shield=True):  # given up on or cancelled: still close it
                await checker.check_aclose()
    checker.report_longest_block()
    if checker.problems:
        raise CheckEnvError(str(instance), checker.problems)


class _GlobalDraws:
    """Which of the global `random` and `numpy.random` generators were drawn from inside the
    block: the usual reason a seeded episode does not replay."""

    def __init__(self) -> None:
        self.modules: list[str] = []

    @contextmanager
    def watch(self) -> Iterator[None]:
        before = random.getstate(), _numpy_state()
        try:
            yield
        finally:
            after = random.getstate(), _numpy_state()
            for module, old, new in zip(("random", "numpy.random"), before, after, strict=True):
                if new != old and module not in self.modules:
                    self.modules.append(module)


def _numpy_state() -> tuple[bytes, int]:
    state = np.random.get_state(legacy=False)["state"]
    return np.asarray(state["key"]).tobytes(), int(state["pos"])


class _Ticker:
    """Ticks every 10 ms while the event loop is free. The longest gap between ticks, timed on
    a clock that stops while the loop's thread waits for a CPU or collects garbage
    (`HeldClock`), is the longest the code on the loop kept it from running other tasks: a
    loaded machine delays the ticks, but not on that clock, while `time.sleep` or CPU work in
    the env's call is counted in full."""

    def __init__(self, clock: HeldClock) -> None:
        self.clock = clock
        self.last = clock.now()
        self.longest = 0.0

    def tick(self) -> None:
        now = self.clock.now()
        self.longest = max(self.longest, now - self.last)
        self.last = now

    async def run(self) -> None:
        while True:
            self.tick()
            await anyio.sleep(0.01)


class _Checker:
    def __init__(
        self, env: Any, actions: list[str], max_steps: int, timeout_s: float, max_block_s: float
    ) -> None:
        self.env = env
        self.actions = actions
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.max_block_s = max_block_s
        self.problems: list[str] = []
        self.closed = False
        self.longest_block: tuple[float, str, str] | None = None  # seconds, what, hint
        self.current = "a call of the env"
        self.hint = _AWAIT_BLOCKING_WORK

    def fail(self, problem: str) -> None:
        self.problems.append(problem)

    def report_longest_block(self) -> None:
        if self.longest_block is not None:
            seconds, what, hint = self.longest_block
            self.fail(
                f"{what} blocked the event loop for {seconds:.2f} s (the limit is "
                f"{self.max_block_s:g} s), stalling every other episode on it; {hint}"
            )

    def blocking(self, quiet_s: float, where: str) -> str:
        """What to say of the call in progress, which has kept the event loop from running for
        `quiet_s` seconds, blocked at `where`."""
        return (
            f"{self.current} has blocked the event loop for {quiet_s:.1f} s (longer than "
            f"timeout_s={self.timeout_s:g}), at {where}, and nothing can interrupt it; "
            f"{self.hint}"
        )

    async def run(self, seed: int, tasks: Iterable[Task] | None) -> None:
        if not isinstance(self.env, Env):
            self.fail(f"{type(self.env).__name__} is not a subclass of agenthub.Env")
            return
        if not self.check_methods():
            self.closed = True  # awaiting the env, even to close it, would only add TypeErrors
            return
        self.check_spec(self.env.spec)
        picked = await self.pick_tasks(tasks)
        if picked and tasks is None:  # tasks given are what the caller checks the env on
            await self.read_splits()
        draws = _GlobalDraws()
        for task in picked:
            with draws.watch():
                first = await self.episode(task, seed)
                if first is None:
                    return
                again = await self.episode(task, seed)
            if again is not None and again != first:
                drew = " and ".join(f"`{module}`" for module in draws.modules)
                self.fail(
                    f"task {task.id!r}: two episodes with seed={seed} and the same actions "
                    f"differed: {_first_difference(first, again)}. "
                    + (f"It drew from the global {drew} module. " if drew else "")
                    + "Draw randomness only from self.np_random after self.reseed(seed)."
                )
        answered = ((task, answer) for task in picked if (answer := _answer(task)) is not None)
        for task, answer in itertools.islice(answered, 1):
            if await self.episode(task, seed, opening=(answer,)) is None:
                return
        if picked:
            await self.check_cancellation(picked[0], seed)
        await self.check_aclose()

    def check_methods(self) -> bool:
        problems = method_problems(self.env)
        for problem in problems:
            self.fail(problem)
        return not problems

    def check_spec(self, spec: EnvSpec | None) -> None:
        if spec is None:
            return
        try:
            back = EnvSpec.model_validate_json(spec.model_dump_json())
        except ValueError as exc:
            self.fail(f"env.spec does not survive a JSON round trip: {exc}")
            return
        if back != spec:
            self.fail(f"env.spec changes in a JSON round trip: {spec!r} -> {back!r}")

    async def pick_tasks(self, tasks: Iterable[Task] | None) -> list[Task]:
        if tasks is None:
            try:
                async with self.watch("env.tasks('train')", _READ_LAZILY):
                    tasks = list(itertools.islice(self.env.tasks("train"), 2))
            except NoTaskSourceError:
                self.fail("the env has no tasks of its own; pass tasks=[Task(...)] to check_env")
                return []
            except TaskFileError:
                raise  # the data's fault, not the env's: it names FILE:LINE itself
            except Exception as exc:
                self.fail(raised("env.tasks('train')", exc))
                return []
            if not tasks:
                self.fail(
                    "no tasks to check: env.tasks('train') yielded none; fix its task source "
                    "or pass tasks=[Task(...)] to check_env"
                )
                return []
            source = "env.tasks() yielded"
        else:
            if isinstance(tasks, Task | Mapping | str | bytes) or not isinstance(tasks, Iterable):
                self.fail(
                    f"check_env(tasks=...) must be a list of agenthub.Task, got "
                    f"{type(tasks).__name__}"
                )
                return []
            tasks = list(tasks)  # an iterator (agenthub.read_tasks) is read once, here
            source = "check_env(tasks=...) holds"
        if not tasks:
            self.fail("no tasks to check: tasks=[] was given; pass at least one agenthub.Task")
            return []
        for task in tasks:
            if problem := task_problem(task, source):
                self.fail(problem)
                return []
            if Task.model_validate_json(task.model_dump_json()) != task:
                self.fail(f"task {task.id!r} changes in a JSON round trip")
        return list(tasks)

    async def read_splits(self) -> None:
        """Read on through each split as a run would: a bad line deep in a task file fails the
        check, not a run. On the loop, letting it run every 50 ms, so that a read which stalls
        it (a remote source without a timeout) is reported as one, and named while it stalls."""
        within_s = min(READ_AHEAD_S, self.timeout_s / 2)  # a slow source stops short of that
        for split in ("train", "held_out"):
            what = f"env.tasks({split!r})"
            read = 0
            try:
                async with self.watch(what, _READ_WITHOUT_HANGING):
                    started = paused = anyio.current_time()
                    for _ in itertools.islice(checked_tasks(self.env.tasks(split)), READ_AHEAD):
                        read += 1
                        now = anyio.current_time()
                        if now - started > within_s:
                            break
                        if now - paused > 0.05:
                            await anyio.lowlevel.checkpoint()
                            paused = anyio.current_time()
            except NoTaskSourceError:
                continue  # a split it does not offer
            except TaskFileError:
                raise
            except AgentHubError as exc:  # not a Task; the message says what it must be
                self.fail(str(exc))
            except Exception as exc:
                hint = ""
                if not read and split != "train":  # perhaps a split it does not offer
                    hint = f" (an env without a {split!r} split raises NoTaskSourceError for it)"
                self.fail(raised(what, exc) + hint)

    async def guarded(self, what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        try:
            with anyio.fail_after(self.timeout_s):
                async with self.watch(what, _AWAIT_BLOCKING_WORK):
                    return True, await call()
        except TimeoutError:
            self.fail(f"{what} did not return within {self.timeout_s:g} s")
        except Exception as exc:
            self.fail(raised(what, exc))
        return False, None

    @asynccontextmanager
    async def watch(self, what: str, hint: str) -> AsyncIterator[None]:
        """Keep the longest block of the event loop past `max_block_s`, with the call that
        made it, for the report: `fail_after` cannot interrupt such a call, but a ticker kept
        waiting meanwhile shows it."""
        self.current, self.hint = what, hint
        error: Exception | None = None
        with HeldClock() as clock:
            ticker = _Ticker(clock)
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker.run)
                try:
                    yield
                except Exception as exc:  # raised below: the group would wrap it in a group
                    error = exc
                finally:
                    ticker.tick()
                    tg.cancel_scope.cancel()
                    worst = self.longest_block[0] if self.longest_block else self.max_block_s
                    if ticker.longest > worst:
                        self.longest_block = (ticker.longest, what, hint)
        if error is not None:
            raise error

    async def episode(
        self, task: Task, seed: int, opening: Sequence[str] = ()
    ) -> list[_Turn] | None:
        ok, reset = await self.guarded(
            f"reset(task {task.id!r})", lambda: self.env.reset(task, seed=seed)
        )
        if not ok or not self.check_reset(reset):
            return None
        try:
            tools = checked_tools(self.env)
            checked_stop(self.env)
            checked_system_prompt(self.env)
        except Exception as exc:
            self.fail(f"after reset(task {task.id!r}): {described(exc)}")
            return None
        # The tools are part of what the model is shown, so they must replay too.
        turns = [_Turn((reset[0], tools), 0.0, False, False)]
        if tools and not opening:
            opening = _tool_calls(tools)
        actions = itertools.chain(opening, itertools.cycle(self.actions))
        for n, action in zip(range(self.max_steps), actions, strict=False):
            ok, result = await self.guarded(
                f"step #{n + 1} of task {task.id!r} with action {action[:40]!r}",
                lambda a=action: self.env.step(a),  # type: ignore[misc]
            )
            if not ok or not self.check_step(result):
                return None
            turns.append(
                _Turn(result.observation, result.reward, result.terminated, result.truncated)
            )
            if result.terminated or result.truncated:
                return turns
        self.fail(
            f"task {task.id!r}: the episode did not end within {self.max_steps} steps; end it "
            "with terminated=True, or wrap the env in agenthub.wrappers.TurnLimit"
        )
        return None

    def check_reset(self, value: Any) -> bool:
        problems = reset_problems(value)
        for problem in problems:
            self.fail(problem)
        return not problems and self.check_json_info("reset", value[1])

    def check_step(self, value: Any) -> bool:
        problems = step_problems(value)
        for problem in problems:
            self.fail(problem)
        return not problems and self.check_json_info("step", value.info)

    def check_json_info(self, where: str, info: Mapping[str, Any]) -> bool:
        try:
            json.dumps(dict(info))
        except (TypeError, ValueError) as exc:
            self.fail(f"{where} info is not JSON-serialisable: {exc}")
            return False
        return True

    async def check_cancellation(self, task: Task, seed: int) -> None:
        self.current = f"a cancelled reset(task {task.id!r})"
        with anyio.move_on_after(0):
            await self.env.reset(task, seed=seed)
        if await self.episode(task, seed) is None:
            self.fail("the env was not usable again after a cancelled reset()")
            return
        ok, _ = await self.guarded("reset", lambda: self.env.reset(task, seed=seed))
        if ok:
            self.current = f"a cancelled step with action {self.actions[0][:40]!r}"
            with anyio.CancelScope() as scope:
                scope.cancel()
                await self.env.step(self.actions[0])
            if await self.episode(task, seed) is None:
                self.fail("the env was not usable again after a cancelled step()")

    async def check_aclose(self) -> None:
        self.closed = True
        for attempt in ("first", "second"):
            ok, _ = await self.guarded(f"the {attempt} aclose()", self.env.aclose)
            if not ok:
                return


def _tool_calls(tools: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Replies that call tools, so an env's tool functions run under the checks too: one reply
    calling every tool (with arguments made from its schema), then one with a broken call."""
    calls = "".join(
        "<tool_call>"
        + json.dumps(
            {
                "name": tool["function"]["name"],
                "arguments": _example(tool["function"].get("parameters") or {}, root=None),
            }
        )
        + "</tool_call>"
        for tool in tools
    )
    return calls, '<tool_call>{"name": </tool_call>'


def _example(schema: Any, root: Any) -> Any:
    """A value that fits a JSON schema as tools' parameters use it (defaults first)."""
    if not isinstance(schema, Mapping):
        return None
    root = schema if root is None else root
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _example(root.get("$defs", {}).get(name, {}), root)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key, ()) if o.get("type") != "null"]
        if options:
            return _example(options[0], root)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = max(1, low + (1 if "exclusiveMinimum" in schema else 0))
        return value if kind == "integer" else float(value)
    if kind == "string":
        return "a" * max(1, int(schema.get("minLength", 1)))
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(schema.get("items", {}), root)] * int(schema.get("minItems", 0))
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            k: _example(properties[k], root) for k in schema.get("required", ()) if k in properties
        }
    return None


def _answer(task: Task) -> str | None:
    """A reply that should win the task, so the winning branch of `step` is played too: the
    correct response built-in tasks keep in `metadata["reference"]`, else a text or number
    label."""
    reference = task.metadata.get("reference")
    if isinstance(reference, str):
        return reference
    label = task.label
    if isinstance(label, bool) or not isinstance(label, str | int | float):
        return None
    return str(label)


def _first_difference(a: list[_Turn], b: list[_Turn]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"turn {i}: {x} vs {y}"
    return f"lengths {len(a)} vs {len(b)}"
