from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agenthub._errors import AgentHubError


@dataclass(frozen=True)
class RewardOutput:
    """Per-sample results of one reward call, in the order of the samples sent."""

    rewards: list[float]
    scores: list[float] | None = None
    extra_logs: dict[str, list[float]] = field(default_factory=dict)

    def sample(self, i: int) -> tuple[float, float | None, dict[str, float]]:
        score = self.scores[i] if self.scores is not None else None
        return self.rewards[i], score, {k: v[i] for k, v in self.extra_logs.items()}


def parse_reward_output(
    raw: Any, n: int, *, source: str, samples: list[str], error: type[AgentHubError]
) -> RewardOutput:
    """Turn what an OpenRLHF reward function or server returned into a `RewardOutput`.

    Accepts a dict with `rewards` and optional `scores` and `extra_logs`, or bare rewards;
    values may be tensors, arrays, lists or scalars. Anything else raises `error` naming the
    source and the offending sample; nothing is silently scored 0.
    """

    def floats(value: Any, what: str) -> list[float]:
        if hasattr(value, "tolist"):  # torch tensors and numpy arrays, without importing either
            value = value.tolist()
        if not isinstance(value, list | tuple):
            value = [value] * n if n == 1 or what.startswith("extra_logs") else value
        if not isinstance(value, list | tuple):
            raise error(
                f"{source} returned {what} as {type(value).__name__} for {n} samples; "
                "return a list or tensor with one number per sample"
            )
        if len(value) != n:
            raise error(
                f"{source} returned {len(value)} {what} for {n} samples; "
                "return exactly one per sample, in order"
            )
        out = []
        for i, v in enumerate(value):
            if hasattr(v, "tolist"):  # a numpy number or a 0-d tensor in a list
                v = v.tolist()
            if isinstance(v, list | tuple) and len(v) == 1:
                v = v[0]
            if not isinstance(v, int | float) or not math.isfinite(v):
                raise error(
                    f"{source} returned {what}[{i}] = {v!r} for sample {i} "
                    f"({samples[i]}); it must be a finite number"
                )
            out.append(float(v))
        return out

    if isinstance(raw, Mapping):
        if "rewards" not in raw:
            raise error(
                f"{source} returned a dict without 'rewards' (keys: {sorted(raw)}); "
                "return {'rewards': ..., 'scores': ..., 'extra_logs': {...}} or bare rewards"
            )
        scores = raw.get("scores")
        logs = raw.get("extra_logs") or {}
        if not isinstance(logs, Mapping):
            raise error(f"{source} returned extra_logs as {type(logs).__name__}; use a dict")
        return RewardOutput(
            rewards=floats(raw["rewards"], "rewards"),
            scores=None if scores is None else floats(scores, "scores"),
            extra_logs={str(k): floats(v, f"extra_logs[{k!r}]") for k, v in logs.items()},
        )
    return RewardOutput(rewards=floats(raw, "rewards"))
