"""Held-out evaluation during training: the policy of a step played on held-out tasks on a
rollout worker's engine, logged, and remembered for the run's summary."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agenthub.trainer._cluster import Cluster
from agenthub.trainer._config import EvalConfig
from agenthub.trainer._metrics import MetricsLog

__all__ = ["EvalResult", "HeldOutEvaluator", "HeldOutRewards"]


@dataclass(frozen=True)
class EvalResult:
    """One held-out evaluation, as a rollout worker reports it: mean reward and score of the
    episodes without errors (NaN with none), and the oldest and newest policy version that
    sampled their tokens (rollouts go on meanwhile, so a weight sync can land in the middle)."""

    reward: float
    score: float
    episodes: int
    errors: int
    version: int
    version_max: int
    error_causes: dict[str, int] = field(default_factory=dict)
    last_error: str = ""

    @property
    def held_out_reward(self) -> float | None:
        """The reward, None when every episode failed (there is none to give)."""
        return self.reward if self.errors < self.episodes else None

    def line(self, step: int) -> str:
        """The log line: its reward, and its failed episodes' causes (with every episode
        failed there is no reward to give, only the errors)."""
        failed = ""
        if self.errors:
            causes = ", ".join(f"{c} x{n}" for c, n in Counter(self.error_causes).most_common())
            failed = f"{self.errors} of {self.episodes} episodes ended in errors ({causes}; the "
            failed += f"last: {self.last_error[:300]})"
        if self.errors == self.episodes:
            return f"held-out evaluation at step {step}: {failed or 'no episodes'}"
        versions = f" {self.version}"
        if self.version_max != self.version:
            versions = f"s {self.version}-{self.version_max}"
        return (
            f"held-out reward {self.reward:.3f} at step {step} "
            f"({self.episodes} episodes, policy version{versions})"
            + (f"; {failed}" if failed else "")
        )

    def to_json(self, step: int) -> dict[str, Any]:
        """Its line of `metrics.jsonl`."""
        return {
            "step": step,
            "eval/reward": self.reward,
            "eval/score": self.score,
            "eval/policy_version": self.version,
            "eval/policy_version_max": self.version_max,
            "eval/errors": self.errors,
        }


class HeldOutRewards:
    """The held-out reward a run started with and the last one, for its summary (None for an
    evaluation whose episodes all failed: not an earlier one's reward as the last, nor a later
    one's as the first)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def add(self, reward: float | None) -> None:
        if not self.count:
            self.first = reward
        self.last = reward
        self.count += 1

    def replay(self, records: Iterable[dict[str, Any]]) -> None:
        """Take the evaluations logged in `metrics.jsonl` (a resumed run does not evaluate
        again before it trains on)."""
        for record in records:
            if "eval/errors" in record:  # a NaN reward (every episode failed) is not logged
                self.add(record.get("eval/reward"))


class HeldOutEvaluator:
    """Runs held-out evaluations on the cluster, logs each, and keeps `rewards`. Evaluations
    started after a step run alongside the next steps."""

    def __init__(
        self,
        cfg: EvalConfig,
        cluster: Cluster,
        metrics: MetricsLog,
        rewards: HeldOutRewards,
        log: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.metrics = metrics
        self.rewards = rewards
        self.log = log
        self._running: list[asyncio.Task[None]] = []

    def due(self, step: int, max_steps: int) -> bool:
        """Whether step `step` is evaluated while training goes on (the last one is evaluated
        once the run ends)."""
        return bool(self.cfg.every) and step % self.cfg.every == 0 and step < max_steps

    async def evaluate(self, step: int, after: asyncio.Task[None] | None = None) -> None:
        """Held-out reward of step `step`'s policy: the evaluation waits for that step's weight
        sync (`after`), or in async mode it would measure the policy before it."""
        if after is not None:
            await after
        result = EvalResult(**await self.cluster.evaluate(self.cfg))
        self.rewards.add(result.held_out_reward)
        self.metrics.log(result.to_json(step))
        self.metrics.plot()
        self.log(result.line(step))

    def start(self, step: int, after: asyncio.Task[None] | None) -> None:
        """`evaluate` in the background."""
        self._running.append(asyncio.create_task(self.evaluate(step, after)))

    async def settle(self, *, cancel: bool) -> None:
        """Wait for the evaluations under way, or cancel them first (`cancel`: the run is
        stopping and does not wait for them)."""
        if cancel:
            for evaluation in self._running:
                evaluation.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
