"""How `vs_verifiers` counts episodes that failed, the same way for both sides (the scripts
run as `python benchmarks/NAME.py`, which puts this folder on the path).

A failed episode counts in its side's wall time but not among its completed episodes: every
rate is completed episodes over the seconds taken. Failures are counted by cause, as each side
records them: verifiers in each rollout's output (`error`, its `ErrorData`: the exception's
class name, e.g. `EmptyModelResponseError`, when a rollout was aborted), agenthub in its
summary (`errors`: the typed episode errors' causes, e.g. `env_error`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RULE = (
    "failed episodes count in their side's wall time but not as completed episodes, on both "
    "sides: rates are completed episodes/s (steady: the N-episode run's completed share of the "
    "episodes it played beyond the short run of one episode a task, over the seconds they added)"
)


@dataclass(frozen=True)
class SideRun:
    """One run of one side: the episodes it played, its failures by cause, its wall time."""

    episodes: int
    seconds: float
    failed: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_failed > self.episodes:
            raise ValueError(
                f"{self.num_failed} failed episodes of {self.episodes} played: a side's "
                "failures are counted once each; check how its run counts them"
            )

    @property
    def num_failed(self) -> int:
        return sum(self.failed.values())

    @property
    def completed(self) -> int:
        return self.episodes - self.num_failed


def verifiers_failures(outputs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Failed rollouts by cause, from verifiers' own per-rollout record: a rollout aborted by a
    `vf.Error` (e.g. `EmptyModelResponseError` on an empty reply) keeps that error in its state,
    and its output carries it as `error` (`ErrorData`, the class name under `error`)."""
    causes: Counter[str] = Counter()
    for output in outputs:
        error = output.get("error")
        if error:
            causes[error["error"] if isinstance(error, Mapping) else str(error)] += 1
    return dict(causes)


def whole_rate(run: SideRun) -> float:
    """Completed episodes per second of the whole run, its start-up included."""
    return run.completed / run.seconds


def steady_rate(one: SideRun, many: SideRun) -> float:
    """Completed episodes/s with start-up left out: the episodes the long run played beyond the
    short one (one episode a task), times the long run's completed share, over the seconds they
    added."""
    extra = (many.episodes - one.episodes) * many.completed / many.episodes
    return extra / max(many.seconds - one.seconds, 1e-9)


def describe_failures(failed: Mapping[str, int]) -> str:
    """`none`, or `3 (EmptyModelResponseError x2, env_error x1)`."""
    total = sum(failed.values())
    if not total:
        return "none"
    causes = ", ".join(f"{cause} x{n}" for cause, n in sorted(failed.items()))
    return f"{total} ({causes})"


def add_failures(runs: Iterable[SideRun]) -> dict[str, int]:
    """The failures of several runs, by cause."""
    total: Counter[str] = Counter()
    for run in runs:
        total.update(run.failed)
    return dict(total)
