"""Environments for the runner tests; each instance is tracked so tests can see what stayed open."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio

from agenthub import Env, Message, RewardFuncError, Step, Task, Transcript, transcript


class TrackedEnv(Env[list[Message]]):
    """Counts down from the task's label; behaviour per task comes from `task.metadata`:
    `fail_at` (turn whose step raises), `step_delay_s`, `step_block_s` (blocks the loop),
    `score_error` (raise a scoring error; a string is its message), `close_error` (`aclose`
    raises), `role` (of the messages `step` answers with), `wrong_return`
    (`reset` or `step` returns a wrong type: "reset_obs_only", "step_tuple", "step_dicts",
    "step_int_flag")."""

    live: ClassVar[set[int]] = set()
    made: ClassVar[int] = 0
    in_flight: ClassVar[int] = 0
    max_in_flight: ClassVar[int] = 0
    transcripts: ClassVar[list[Transcript | None]] = []
    actions: ClassVar[list[str]] = []

    def __init__(self, **kwargs: Any) -> None:
        type(self).made += 1
        self.remaining = 0
        self.turn = 0
        self.meta: dict[str, Any] = {}
        TrackedEnv.live.add(id(self))

    @classmethod
    def reset_counters(cls) -> None:
        cls.live = set()
        cls.made = cls.in_flight = cls.max_in_flight = 0
        cls.transcripts = []
        cls.actions = []

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.reseed(seed)
        assert isinstance(task.label, int)
        self.remaining, self.turn, self.meta = task.label, 0, dict(task.metadata)
        observation = [Message(role="user", content=f"Start at {self.remaining}.")]
        if self.meta.get("wrong_return") == "reset_obs_only":
            return observation  # type: ignore[return-value]
        return observation, {}

    async def step(self, action: str) -> Step[list[Message]]:
        TrackedEnv.in_flight += 1
        TrackedEnv.max_in_flight = max(TrackedEnv.max_in_flight, TrackedEnv.in_flight)
        try:
            self.turn += 1
            TrackedEnv.transcripts.append(transcript())
            TrackedEnv.actions.append(action)
            await anyio.sleep(float(self.meta.get("step_delay_s", 0.0)))
            time.sleep(float(self.meta.get("step_block_s", 0.0)))  # noqa: ASYNC251 - on purpose
            if self.meta.get("fail_at") == self.turn:
                raise ValueError(f"broken at turn {self.turn}")
            if self.meta.get("exit_at") == self.turn:
                raise SystemExit(f"sys.exit at turn {self.turn}")
            if error := self.meta.get("score_error"):
                message = error if isinstance(error, str) else "reward file returned a string"
                raise RewardFuncError(message)
            self.remaining -= 1
            done = self.remaining <= 0
            wrong = self.meta.get("wrong_return")
            if wrong == "step_tuple":
                return ([], 0.0, done, False, {})  # type: ignore[return-value]
            if wrong == "step_dicts":
                return Step([{"role": "user", "content": "again"}])  # type: ignore[list-item]
            if wrong == "step_int_flag":
                return Step([], terminated=int(done))  # type: ignore[arg-type]
            return Step(
                [Message(role=self.meta.get("role", "user"), content=str(self.remaining))],
                reward=1.0 if done else 0.0,
                terminated=done,
                score=1.0 if done else None,
                extra_logs={"turn": float(self.turn)},
            )
        finally:
            TrackedEnv.in_flight -= 1

    async def aclose(self) -> None:
        TrackedEnv.live.discard(id(self))
        if self.meta.get("close_error"):
            raise OSError("socket already closed")
