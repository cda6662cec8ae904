"""`Trajectory`: one finished episode, as one JSON line."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

__all__ = ["EpisodeError", "ErrorCause", "Timings", "Trajectory"]

ErrorCause = Literal[
    "env_error",
    "env_timeout",
    "generation_error",
    "generation_timeout",
    "score_error",
    "score_timeout",
]
"""Why an episode failed: the env raised (`env_error`) or overran its step timeout
(`env_timeout`, covering `reset` and `step`); the engine failed (`generation_error`) or overran
the generation timeout; scoring failed (`score_error`: the env raised agenthub's
`RewardFuncError` or `RewardModelError`, or the runner's outcome scorer raised) or the outcome
scorer overran its timeout (`score_timeout`)."""


class EpisodeError(BaseModel):
    """A failure recorded on the trajectory instead of stopping the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cause: ErrorCause
    message: str


class Timings(BaseModel):
    """Seconds spent in each phase of the episode."""

    model_config = ConfigDict(extra="forbid")

    generate_s: float = 0.0
    env_s: float = 0.0
    score_s: float = 0.0
    total_s: float = 0.0


class Trajectory(BaseModel):
    """A finished episode as the trainer sees it.

    `tokens` is the whole sequence (prompt, replies, env messages); `loss_mask` is 1 on tokens
    the model sampled and 0 elsewhere; `logprobs` are the rollout engine's logprobs of the
    sampled tokens (0.0 where the mask is 0); `policy_versions` the engine's policy version for
    each token. `step_rewards` has one reward per env step and `reward` is their sum; `score`
    is the env's task score when it reported one. `error` is set when the episode failed;
    `terminated` and `truncated` are then both false. `sample` says which of its task's
    samples the episode is (its seeds derive from it), so a resumed run plays the ones missing.
    `finish_reasons` has one entry per model reply, in order: `length` where the engine cut the
    reply at its token limit (`max_reply_tokens`, or the room left under `max_tokens`), `stop`
    where it ended on its own (empty where they were not recorded: older trajectories, the REPL).
    `segments` holds where each segment after the first starts in `tokens`, for an agent
    program that rewrote its history: each segment is a training sample of its own (its own
    prompt, its model tokens exactly as sampled) sharing the episode's reward;
    `segment_trajectories()` splits them. Empty for one sequence, as every env's episode is.
    """

    model_config = ConfigDict(extra="forbid")

    env: str
    task_id: str
    sample: int = 0
    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    step_rewards: list[float]
    reward: float
    score: float | None = None
    terminated: bool
    truncated: bool
    num_turns: int
    error: EpisodeError | None = None
    timings: Timings
    extra_logs: dict[str, float] = {}
    finish_reasons: list[Literal["stop", "length"]] = []
    segments: list[int] = []

    @model_validator(mode="after")
    def _check_lengths(self) -> Trajectory:
        n = len(self.tokens)
        if not len(self.loss_mask) == len(self.logprobs) == len(self.policy_versions) == n:
            raise ValueError(
                f"trajectory of {n} tokens has {len(self.loss_mask)} mask entries, "
                f"{len(self.logprobs)} logprobs and {len(self.policy_versions)} policy versions"
            )
        if self.segments != sorted(set(self.segments)) or not all(0 < s < n for s in self.segments):
            raise ValueError(f"segments must be increasing offsets inside the {n} tokens")
        return self

    @model_serializer(mode="wrap")
    def _one_sequence_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # `segments` is written only where there are several, so every env's JSON line (and
        # every reader of it) stays as it was.
        data: dict[str, Any] = handler(self)
        if not data.get("segments"):
            data.pop("segments", None)
        return data

    def segment_trajectories(self) -> list[Trajectory]:
        """One trajectory per segment, each with the episode's reward and outcome (just
        `[self]` when there is one segment)."""
        if not self.segments:
            return [self]
        bounds = [0, *self.segments, len(self.tokens)]
        return [
            self.model_copy(
                update={
                    "tokens": self.tokens[a:b],
                    "loss_mask": self.loss_mask[a:b],
                    "logprobs": self.logprobs[a:b],
                    "policy_versions": self.policy_versions[a:b],
                    "segments": [],
                }
            )
            for a, b in itertools.pairwise(bounds)
        ]

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def success_score(self) -> float:
        """The score for pass@k and filtering: `score` when reported, else `reward`."""
        return self.reward if self.score is None else self.score


def mean_extra_logs(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """The mean of each `extra_logs` key over the trajectories that logged it, by key."""
    logs: dict[str, list[float]] = {}
    for t in trajectories:
        for key, value in t.extra_logs.items():
            logs.setdefault(key, []).append(value)
    return {key: sum(values) / len(values) for key, values in sorted(logs.items())}
