"""verifiers' `v1` tasksets: their tasks as agenthub tasks, each reply scored by the task's
own `@vf.reward` and `@vf.metric` functions over a trace of the episode."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import (
    MissingExtraError,
    call_foreign,
    foreign_failure,
    import_foreign,
)
from agenthub.envs.verifiers._messages import to_agenthub


def v1(module: str = "") -> Any:
    """A module of `verifiers.v1` as verifiers 0.3 and 0.4 lay it out (earlier releases
    had a `v1` of another shape)."""
    name = "verifiers.v1" + (f".{module}" if module else "")
    try:
        return import_foreign(name, env="verifiers_v1", extra="verifiers")
    except MissingExtraError:
        vf = import_foreign("verifiers", env="verifiers_v1", extra="verifiers")
    raise MissingExtraError(
        f"the verifiers_v1 env runs verifiers' v1 tasksets as verifiers 0.3 and 0.4 define "
        f"them, which the installed verifiers {getattr(vf, '__version__', '')} does not "
        f"(it has no {name}): pip install 'agenthub[verifiers]'"
    )


class VerifiersTasksetEnv(Env[list[Message]]):
    """A verifiers `v1` taskset, one reply per task; needs the extra `verifiers`.

    `taskset` is the taskset's id as verifiers loads it (an installed taskset package or a
    module on the path exporting one `Taskset` subclass); further KEY=VALUE arguments are its
    config. Each task's prompt is its `TaskData` prompt (after its system prompt); the reply is
    recorded as the trace's sampled assistant message and scored offline by the task's own
    `score` (rewards and metrics needing a runtime are skipped, as verifiers skips them). The
    reward is the trace's weighted reward; rewards and metrics go to `extra_logs`; `score` is
    the one named by `score_metric`, else 1.0 for a reward of at least 1.0.

    Tasks: the taskset's tasks for `train`; `held_out` is the same list (v1 tasksets have no
    splits). v1's harnesses, runtimes and multi-agent envs are not run.
    """

    def __init__(self, *, taskset: str, score_metric: str | None = None, **config: Any) -> None:
        loaders, generic = v1("utils.loaders"), v1("utils.generic")
        taskset_class = loaders.taskset_class(taskset)
        base = v1().TasksetConfig
        config_type = generic.concrete_type(taskset_class, base) or base
        self._taskset = taskset_class(config_type(id=taskset, **config))
        self._name = taskset
        self._score_metric = score_metric
        self._tasks: list[Any] | None = None
        self._current: tuple[Any, list[Message]] | None = None

    def _all(self) -> list[Any]:
        if self._tasks is None:
            self._tasks = list(self._taskset)
        return self._tasks

    def tasks(self, split: str = "train") -> Iterator[Task]:
        if split not in ("train", "held_out"):
            raise ValueError(f"v1 tasksets have the splits 'train' and 'held_out', not {split!r}")
        for index, task in enumerate(self._all()):
            data = task.data
            yield Task(
                id=f"{self._name}/{task.key[:12]}",
                prompt=tuple(_prompt(data)),
                metadata={"index": index, "key": task.key},
            )

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        index, tasks = task.metadata.get("index"), self._all()
        found = tasks[index] if isinstance(index, int) and 0 <= index < len(tasks) else None
        if found is None or found.key != task.metadata.get("key"):
            raise ValueError(f"task {task.id} is not a task of the {self._name} taskset")
        self._current = (found, task.messages())
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        if self._current is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        foreign, prompt = self._current
        self._current = None
        trace = await call_foreign(
            "verifiers", "recording the reply", lambda: _trace(foreign, prompt, action)
        )
        try:
            await foreign.score(trace)
        except Exception as exc:
            raise foreign_failure("verifiers", f"scoring a task of {self._name}", exc) from exc
        logs = {k: r.score for k, r in trace.rewards.items() if r is not None}
        logs |= {k: float(v) for k, v in trace.metrics.items() if v is not None}
        reward = float(trace.reward)
        if self._score_metric is not None:
            if self._score_metric not in logs:
                raise ValueError(
                    f"score_metric={self._score_metric!r} is not a reward or metric of "
                    f"{self._name}; it has: {', '.join(sorted(logs)) or 'none'}"
                )
            score = logs[self._score_metric]
        else:
            score = 1.0 if reward >= 1.0 else 0.0
        return Step([], reward, terminated=True, score=score, extra_logs=logs)

    async def aclose(self) -> None:
        self._current = None


def _prompt(data: Any) -> list[Message]:
    messages = []
    if data.system_prompt:
        messages.append(Message(role="system", content=data.system_prompt))
    if isinstance(data.prompt, str):
        messages.append(Message(role="user", content=data.prompt))
    else:
        messages.extend(to_agenthub(data.prompt or []))
    return messages


def _trace(task: Any, prompt: Sequence[Message], reply: str) -> Any:
    """A v1 `Trace` of one exchange: the prompt's messages, then the reply as sampled."""
    vf, graph, types, traces = v1(), v1("graph"), v1("types"), v1("trace")
    trace = vf.Trace(
        task=traces.TraceTask(
            type=type(task).__name__, data=task.data, key=task.key, hash=task.hash
        ),
        agent=traces.AgentInfo(config=vf.AgentConfig()),
    )
    kinds = {
        "system": types.SystemMessage,
        "user": types.UserMessage,
        "assistant": types.AssistantMessage,
    }
    for message in prompt:
        node = graph.MessageNode(
            parent=len(trace.nodes) - 1 if trace.nodes else None,
            message=kinds[message.role](content=message.content),
        )
        trace.nodes.append(node)
    reply_node = graph.MessageNode(
        parent=len(trace.nodes) - 1 if trace.nodes else None,
        message=types.AssistantMessage(content=reply),
        sampled=True,
    )
    trace.nodes.append(reply_node)
    trace.is_completed = True
    trace.ok = True
    return trace
