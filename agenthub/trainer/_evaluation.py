"""Held-out evaluation during training: the policy of a step played on held-out tasks on a
rollout worker's engine, logged, and remembered for the run's summary."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from agenthub.agents._eval_summary import EvalSummary
from agenthub.trainer._cluster import Cluster
from agenthub.trainer._config import HeldOutConfig
from agenthub.trainer._metrics import MetricsLog

__all__ = ["HeldOutEvaluator", "HeldOutRewards", "evaluated_line", "held_out_reward"]


def held_out_reward(summary: EvalSummary) -> float | None:
    """An evaluation's reward for the run's summary; None when every episode failed (there is
    none to give, only the errors)."""
    return summary.mean_reward if summary.num_errors < summary.episodes else None


def evaluated_line(summary: EvalSummary, step: int) -> str:
    """The log line of a held-out evaluation: its reward (`agenthub eval`'s, an episode in
    error counting 0), and its failed episodes' causes."""
    failed = ""
    if summary.num_errors:
        causes = ", ".join(f"{c} x{n}" for c, n in Counter(summary.errors).most_common())
        failed = f"{summary.num_errors} of {summary.episodes} episodes ended in errors ({causes}; "
        failed += f"the last: {(summary.last_error or '')[:300]})"
    reward = held_out_reward(summary)
    if reward is None:
        return f"held-out evaluation at step {step}: {failed or 'no episodes'}"
    versions = f" {summary.policy_version}"
    if summary.policy_version_max != summary.policy_version:
        versions = f"s {summary.policy_version}-{summary.policy_version_max}"
    return (
        f"held-out reward {reward:.3f} at step {step} "
        f"({summary.episodes} episodes, policy version{versions})"
        + (f"; {failed}" if failed else "")
    )


def evaluated_record(summary: EvalSummary, step: int) -> dict[str, Any]:
    """An evaluation's line of `metrics.jsonl`."""
    nan = float("nan")
    return {
        "step": step,
        "eval/reward": nan if summary.mean_reward is None else summary.mean_reward,
        "eval/score": nan if summary.mean_score is None else summary.mean_score,
        "eval/policy_version": summary.policy_version,
        "eval/policy_version_max": summary.policy_version_max,
        "eval/errors": summary.num_errors,
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
        cfg: HeldOutConfig,
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
        summary = await self.cluster.evaluate(self.cfg)
        self.rewards.add(held_out_reward(summary))
        self.metrics.log(evaluated_record(summary, step))
        self.metrics.plot()
        self.log(evaluated_line(summary, step))

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
