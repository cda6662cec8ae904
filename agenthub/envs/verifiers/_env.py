from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import JsonValue, TypeAdapter

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import ForeignEnvError, foreign_failure
from agenthub.envs.verifiers._bridge import Ask, Done, Rollout, said_since
from agenthub.envs.verifiers._load import load
from agenthub.envs.verifiers._messages import to_agenthub, to_verifiers

_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


class VerifiersEnv(Env[list[Message]]):
    """A verifiers environment of the classic API, run unchanged; needs the extra `verifiers`.

    The classic API: `vf.load_environment`, `SingleTurnEnv`, `MultiTurnEnv`, `Rubric`.

    `env_id` is the module name `vf.load_environment` takes (an installed environment
    package); further KEY=VALUE arguments go to its `load_environment`. verifiers runs each
    rollout with its own loop (`env_response`, stop conditions, rubric) and a client that hands
    each prompt to agenthub and returns the reply agenthub sampled: agenthub owns generation.
    Each observation is the messages verifiers added since the last reply. A `ToolEnv`'s tools
    are the env's `tools`; the calls a reply writes (`<tool_call>{"name": ..., "arguments":
    ...}</tool_call>`, as `agenthub.tools` reads them) reach verifiers as the reply's tool calls,
    and its tool messages come back as `tool` messages.

    Tasks: the environment's dataset (`train`) and eval dataset (`held_out`; verifiers itself
    falls back to the dataset where there is none). At the end the rubric's reward is the
    step's reward and its metrics go to `extra_logs`; `score` is the metric named by
    `score_metric`, else 1.0 for a reward of at least 1.0 and 0.0 otherwise.
    """

    def __init__(self, *, env_id: str, score_metric: str | None = None, **env_args: Any) -> None:
        self._env_id = env_id
        self._score_metric = score_metric
        self._env = load(env_id, env_args)
        self._rollout: Rollout | None = None
        self._seen = 0

    def tasks(self, split: str = "train") -> Iterator[Task]:
        if split == "train":
            rows = self._env.get_dataset()
        elif split == "held_out":
            rows = self._env.get_eval_dataset()
        else:
            raise ValueError(f"verifiers has the splits 'train' and 'held_out', not {split!r}")
        for row in rows:
            yield _task(self._env_id, split, row)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        await self.aclose()
        prompt = task.messages()
        rollout_input = {
            "prompt": to_verifiers(prompt),
            "example_id": task.metadata.get("example_id", 0),
            "answer": "" if task.label is None else str(task.label),
            "info": task.metadata.get("info") or {},
        }
        if task.metadata.get("task") is not None:
            rollout_input["task"] = task.metadata["task"]
        self._rollout = Rollout(self._env, rollout_input)
        event = await self._next("starting the rollout", self._rollout.next())
        if isinstance(event, Done):
            raise ForeignEnvError(
                f"verifiers ended the rollout of {self._env_id} before asking for a reply"
            )
        self._seen = len(event.prompt)
        self.tools = event.tools  # a ToolEnv's tools, shown to the model as the episode opens
        return said_since(event.prompt, len(prompt)), {}

    async def step(self, action: str) -> Step[list[Message]]:
        rollout = self._rollout
        if rollout is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        event = await self._next("running env_response and the rubric", rollout.reply(action))
        if isinstance(event, Ask):
            new = said_since(event.prompt, self._seen + 1)
            self._seen = len(event.prompt)
            return Step(new)
        self._rollout = None
        return self._outcome(event.output)

    async def _next(self, what: str, event: Any) -> Ask | Done:
        try:
            result: Ask | Done = await event
        except Exception as exc:
            await self.aclose()
            raise foreign_failure("verifiers", f"{what} of {self._env_id}", exc) from exc
        return result

    def _outcome(self, output: Mapping[str, Any]) -> Step[list[Message]]:
        if output.get("error"):
            raise ForeignEnvError(
                f"verifiers recorded an error in the rollout of {self._env_id}: {output['error']}"
            )
        completion = list(output.get("completion") or [])
        last_reply = max(
            (i for i, m in enumerate(to_agenthub(completion)) if m.role == "assistant"),
            default=-1,
        )
        final = to_agenthub(completion[last_reply + 1 :])
        reward = float(output.get("reward") or 0.0)
        metrics = {k: float(v) for k, v in (output.get("metrics") or {}).items()}
        if self._score_metric is not None:
            if self._score_metric not in metrics:
                raise ForeignEnvError(
                    f"score_metric={self._score_metric!r} is not a metric of {self._env_id}'s "
                    f"rubric; it has: {', '.join(sorted(metrics)) or 'none'}"
                )
            score = metrics[self._score_metric]
        else:
            score = 1.0 if reward >= 1.0 else 0.0
        truncated = bool(output.get("is_truncated"))
        return Step(
            final,
            reward,
            terminated=not truncated,
            truncated=truncated,
            info={"stop_condition": str(output.get("stop_condition"))},
            score=score,
            extra_logs=metrics,
        )

    async def aclose(self) -> None:
        rollout, self._rollout = self._rollout, None
        if rollout is not None:
            await rollout.aclose()


def _task(env_id: str, split: str, row: Mapping[str, Any]) -> Task:
    example_id = row.get("example_id", 0)
    info = row.get("info") or {}
    return Task(
        id=f"{env_id}/{split}/{example_id}",
        prompt=tuple(to_agenthub(row["prompt"])),
        label=row.get("answer"),
        metadata={
            "example_id": _JSON.validate_python(example_id),
            "info": _JSON.validate_python(info),
            "task": _JSON.validate_python(row.get("task")),
        },
    )
