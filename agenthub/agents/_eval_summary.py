"""An evaluation's figures, defined once for `agenthub eval`, the trainer's held-out evaluation
and `agenthub.evaluate`:

- **Reward** is the mean of every episode's `reward`, an episode that ended in an error (the env
  raised, a step or a reply timed out, scoring failed) counting as 0, whatever it earned before
  it failed. Errors are not left out: a model whose episodes crash is not rewarded for the ones
  that did not, and the same model on the same tasks gets the same number however many fail.
  How many failed, and why, is reported beside it (`errors`, `last_error`).
- **Score** is the same mean over each episode's `success_score` (the env's task score where it
  reports one, else its reward), errors again as 0.
- **pass@k** is given when every score is 0 or 1: the unbiased estimator of Chen et al. (2021),
  `1 - C(n - c, k) / C(n, k)` for a task with `n` samples of which `c` scored 1, averaged over
  the tasks with at least `k` samples; for `k = 1` and for `k = samples_per_task`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from agenthub.agents._trajectory import Trajectory, mean_extra_logs

__all__ = ["EvalSummary", "TokenCounts", "counted_reward", "counted_score", "pass_at_k"]


class TokenCounts(BaseModel):
    total: int
    generated: int
    mean_generated_per_episode: float | None


class EvalSummary(BaseModel):
    """An evaluation's figures (`summary.json` of `agenthub eval`; the trainer's held-out
    evaluation). `mean_reward`, `mean_score` and `pass_at_k` are defined in this module's
    docstring: an episode that ended in an error counts as 0. `errors` counts the failed
    episodes by cause, `last_error` quotes the last ("cause: message"). `policy_version` and
    `policy_version_max` are the oldest and newest policy version that sampled a token (a
    trainer's weight sync may land during an evaluation). Means are None without episodes."""

    model_config = ConfigDict(frozen=True)

    episodes: int
    tasks: int
    mean_reward: float | None
    mean_score: float | None
    pass_at_k: dict[str, float] | None
    terminated: int
    truncated: int
    errors: dict[str, int]
    tokens: TokenCounts
    mean_turns: float | None
    extra_logs: dict[str, float]
    last_error: str | None = None
    policy_version: int | None = None
    policy_version_max: int | None = None

    @property
    def num_errors(self) -> int:
        return sum(self.errors.values())

    @classmethod
    def of(cls, trajectories: Sequence[Trajectory], samples_per_task: int) -> EvalSummary:
        """The summary of `trajectories`, `samples_per_task` of each task asked for."""
        n = len(trajectories)
        by_task: dict[str, list[float]] = {}
        for t in trajectories:
            by_task.setdefault(t.task_id, []).append(counted_score(t))
        scores = [s for group in by_task.values() for s in group]
        generated = sum(t.num_generated_tokens for t in trajectories)
        sampled = [
            v
            for t in trajectories
            for v, m in zip(t.policy_versions, t.loss_mask, strict=True)
            if m
        ]
        failed = [t.error for t in trajectories if t.error is not None]
        return cls(
            episodes=n,
            tasks=len(by_task),
            mean_reward=sum(counted_reward(t) for t in trajectories) / n if n else None,
            mean_score=sum(scores) / n if n else None,
            pass_at_k=_pass_at_ks(list(by_task.values()), samples_per_task),
            terminated=sum(t.terminated for t in trajectories),
            truncated=sum(t.truncated for t in trajectories),
            errors=dict(Counter(e.cause for e in failed)),
            tokens=TokenCounts(
                total=sum(len(t.tokens) for t in trajectories),
                generated=generated,
                mean_generated_per_episode=generated / n if n else None,
            ),
            mean_turns=sum(t.num_turns for t in trajectories) / n if n else None,
            extra_logs=mean_extra_logs(trajectories),
            last_error=f"{failed[-1].cause}: {failed[-1].message}" if failed else None,
            policy_version=min(sampled, default=None),
            policy_version_max=max(sampled, default=None),
        )


def counted_reward(trajectory: Trajectory) -> float:
    """An episode's reward as an evaluation counts it: 0 for one that ended in an error."""
    return 0.0 if trajectory.error else trajectory.reward


def counted_score(trajectory: Trajectory) -> float:
    """An episode's `success_score` as an evaluation counts it: 0 for one that ended in an
    error."""
    return 0.0 if trajectory.error else trajectory.success_score


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021) for n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _pass_at_ks(groups: list[list[float]], samples_per_task: int) -> dict[str, float] | None:
    """pass@1 and pass@`samples_per_task` over each task's scores, when all are 0 or 1."""
    if not groups or not all(s in (0.0, 1.0) for g in groups for s in g):
        return None
    out = {}
    for k in sorted({1, samples_per_task}):
        values = [pass_at_k(len(g), int(sum(g)), k) for g in groups if len(g) >= k]
        if values:
            out[f"pass@{k}"] = sum(values) / len(values)
    return out
