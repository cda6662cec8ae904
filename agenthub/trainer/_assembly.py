"""Batch assembly: groups taken off the queue, judged (stale, failed, without signal, kept)
and counted until a batch is full, and the counters that stop a run that can never fill one."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agenthub._errors import AgentHubError
from agenthub.agents import Trajectory
from agenthub.agents._trajectory import mean_extra_logs
from agenthub.trainer._cluster import Cluster
from agenthub.trainer._config import AlgorithmConfig, TrainConfig
from agenthub.trainer._control import RunControl, StopReason
from agenthub.trainer._metrics import ShapingStats, StepRecord, StepTiming
from agenthub.trainer._shaping import RewardConfig, RewardShaping

if TYPE_CHECKING:
    from agenthub.trainer._batch import TrainBatch

__all__ = ["Batch", "BatchAssembler", "FailedGroups", "NoSignal", "Verdict", "triage"]


def _segments(
    trajectories: list[Trajectory], values: list[float]
) -> tuple[list[Trajectory], list[float]]:
    """The sequences to learn from: each trajectory's segments (an agent program that rewrote
    its history continued in a new one, whose tokens were sampled after that segment's own
    prompt, not after the earlier segments), each with its trajectory's value (advantage or
    reward)."""
    pieces, shared = [], []
    for trajectory, value in zip(trajectories, values, strict=True):
        for piece in trajectory.segment_trajectories():
            pieces.append(piece)
            shared.append(value)
    return pieces, shared


def min_version(group: list[Trajectory]) -> int:
    return min((min(t.policy_versions) for t in group if t.policy_versions), default=0)


def max_version(group: list[Trajectory]) -> int:
    return max((max(t.policy_versions) for t in group if t.policy_versions), default=0)


Verdict = Literal["keep", "stale", "failed", "filtered"]


class FailedGroups:
    """The groups with an episode in error since the last group without one: how many, the
    causes of their errors, and the last error."""

    def __init__(self) -> None:
        self.in_a_row = 0
        self.causes: Counter[str] = Counter()
        self.example = ""

    def add(self, group: list[Trajectory]) -> None:
        errors = [t.error for t in group if t.error is not None]
        if not errors:
            self.in_a_row = 0
            self.causes.clear()
            return
        self.in_a_row += 1
        self.causes.update(e.cause for e in errors)
        self.example = f"{errors[-1].cause}: {errors[-1].message}"

    def error(self, cfg: TrainConfig, out: Path, step: int) -> AgentHubError:
        causes = ", ".join(f"{cause} x{n}" for cause, n in self.causes.most_common())
        return AgentHubError(
            f"the last {self.in_a_row} groups of episodes all ended in errors ({causes}), so "
            f"there was nothing to train on; the last one: {self.example[:500]}. Try the "
            f"environment by hand (agenthub repl --env {cfg.env}) or with "
            "agenthub.testing.check_env. The run is checkpointed at step "
            f"{step}: continue it with agenthub train --out {out} --resume "
            f"(run.max_failed_groups={cfg.run.max_failed_groups} sets how many failed groups "
            "in a row stop a run)"
        )


def triage(group: list[Trajectory], version: int, algo: AlgorithmConfig) -> Verdict:
    """What the learner at policy `version` does with a finished group.

    `stale`: some token was sampled more than `max_staleness` versions ago; `failed`: an
    episode ended in an error (its reward means nothing); `filtered`: dynamic filtering found
    no signal (all scores equal) or a mean score outside [filter_low, filter_high]; else `keep`.
    """
    from agenthub.trainer._advantages import filter_groups

    if version - min_version(group) > algo.max_staleness:
        return "stale"
    if any(t.error is not None for t in group):
        return "failed"
    if algo.filter_groups:
        low, high = algo.filter_low, algo.filter_high
        keep = filter_groups(
            [t.success_score for t in group],
            len(group),
            -math.inf if low is None else low,
            math.inf if high is None else high,
        )
        if not bool(keep.all()):
            return "filtered"
    return "keep"


class NoSignal:
    """The groups dynamic filtering dropped since the last group kept. A model whose reward
    never varies on an env (every reply wrong, say) gives no step at all, which looks like a
    hang; the run says so when the count reaches 4 batches, then 8, 16, ..."""

    def __init__(self, algo: AlgorithmConfig, limit: int | None = None) -> None:
        self.algo = algo
        self.limit = limit or 32 * algo.batch_groups
        """How many skipped groups in a row stop the run (`run.max_skipped_groups`)."""
        self.kinds: Counter[str] = Counter()
        self._restart()

    def _restart(self) -> None:
        self.in_a_row = 0
        self.kinds.clear()
        self.notice_at = 4 * self.algo.batch_groups

    def add(self, group: list[Trajectory], verdict: Verdict) -> str | None:
        """Count `group`; what to tell the user, when it is time to."""
        if verdict == "keep":
            self._restart()
            return None
        if verdict != "filtered":
            return None
        self.in_a_row += 1
        scores = [t.success_score for t in group]
        if min(scores) == max(scores):
            self.kinds[f"all {scores[0]:g}"] += 1
        else:
            self.kinds[f"mean {sum(scores) / len(scores):.2g}"] += 1
        if self.in_a_row < self.notice_at or self.in_a_row >= self.limit:
            return None  # not yet, or the run stops on it
        self.notice_at *= 2
        return self._why()

    def _why(self) -> str:
        seen = ", ".join(f"{kind} in {n}" for kind, n in self.kinds.most_common(4))
        bounds = ""
        if self.algo.filter_low is not None or self.algo.filter_high is not None:
            bounds = (
                f", or a mean score outside algorithm.filter_low={self.algo.filter_low} .. "
                f"filter_high={self.algo.filter_high}"
            )
        return (
            f"the last {self.in_a_row} groups gave nothing to train on, so no step came of "
            f"them: every episode of a group scored the same{bounds} (scores: {seen}). A "
            "group of equal scores has no signal; if the model never does better or worse on "
            "these tasks, give it easier ones or partial credit (try agenthub eval on the "
            "env). algorithm.filter_groups=false trains on such groups, which moves the policy "
            "only under an estimator without a group baseline (reinforce)"
        )

    def error(self, out: Path, step: int) -> AgentHubError:
        return AgentHubError(
            f"{self._why()}. Without a step the policy cannot change, so the run stopped "
            f"rather than wait on more of the same; it is checkpointed at step {step}: "
            f"continue it with agenthub train --out {out} --resume once the env or the model "
            f"has changed (run.max_skipped_groups={self.limit} sets how many skipped "
            "groups in a row stop a run)"
        )


@dataclass
class Batch:
    """The groups of one learner step (`groups`), and what was seen and dropped meanwhile."""

    groups: list[list[Trajectory]] = field(default_factory=list)
    seen: list[list[Trajectory]] = field(default_factory=list)
    """Every group neither stale nor failed: the train reward is theirs."""
    wait_s: float = 0.0
    """How long the learner, free, waited for this batch."""
    stale: int = 0
    failed: int = 0
    filtered: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    shaping: RewardShaping = field(default_factory=lambda: RewardShaping(RewardConfig(), 1))
    """The run's `reward.*` rules (none by default)."""
    shaped: list[float] | None = None
    """The trained episodes' rewards after the length penalties, once collated (None: none on)."""
    shaping_stats: list[ShapingStats] = field(default_factory=list)
    """What each rule that is on did, once collated."""

    def count(self, group: list[Trajectory], verdict: Verdict) -> None:
        if verdict == "failed":
            self.errors.update(t.error.cause for t in group if t.error is not None)
        if verdict != "stale" and verdict != "failed":
            self.seen.append(group)
        if verdict == "keep":
            self.groups.append(group)
        else:
            setattr(self, verdict, getattr(self, verdict) + 1)

    def collate(self, algo: AlgorithmConfig) -> TrainBatch:
        """The learner's batch: each episode's reward shaped by `shaping` (the length
        penalties, then the clip after the group's baseline), then advantages by
        `algo.estimator` (the batch-whitened ones weighing each sequence by its model tokens,
        as OpenRLHF does), or for gae (whose critic turns rewards into advantages in the
        learner) the shaped rewards."""
        import torch

        from agenthub.trainer._advantages import advantages, sequence_values
        from agenthub.trainer._batch import TrainBatch

        trajectories = [t for group in self.groups for t in group]
        rewards, self.shaping_stats = self.shaping.rewards(trajectories)
        self.shaped = rewards if self.shaping_stats else None
        group_size = len(self.groups[0])
        if algo.estimator == "gae":
            clipped, clip_stats = self.shaping.clip(torch.tensor(rewards, dtype=torch.float32))
            self.shaping_stats += clip_stats
            pieces, shared = _segments(trajectories, clipped.tolist())
            return TrainBatch.collate(
                [t.tokens for t in pieces],
                [t.loss_mask for t in pieces],
                [t.logprobs for t in pieces],
                [0.0] * len(pieces),
                rewards=shared,
                policy_versions=[t.policy_versions for t in pieces],
            )
        _, clip_stats = self.shaping.clip(sequence_values(rewards, group_size, algo.estimator))
        self.shaping_stats += clip_stats
        adv = advantages(
            rewards,
            group_size,
            algo.estimator,
            token_counts=[t.num_generated_tokens for t in trajectories],
            std_norm=algo.advantage_std_norm,
            clip_range=self.shaping.config.clip_range,
        )
        pieces, shared = _segments(trajectories, torch.as_tensor(adv).tolist())
        return TrainBatch.collate(
            [t.tokens for t in pieces],
            [t.loss_mask for t in pieces],
            [t.logprobs for t in pieces],
            shared,
            policy_versions=[t.policy_versions for t in pieces],
        )

    def record(
        self, step: int, learned: dict[str, float], *, queue_depth: int, timing: StepTiming
    ) -> StepRecord:
        """The metrics of learner step `step`, trained on this batch."""
        seen = [t for group in self.seen for t in group]
        trained = [t for group in self.groups for t in group]
        staleness = [step - 1 - min_version(g) for g in self.groups]
        return StepRecord(
            step=step,
            train_reward=sum(t.reward for t in seen) / len(seen) if seen else math.nan,
            train_score=sum(t.success_score for t in seen) / len(seen) if seen else math.nan,
            trained_reward=sum(t.reward for t in trained) / len(trained),
            generated_tokens=sum(t.num_generated_tokens for t in trained),
            mean_turns=sum(t.num_turns for t in trained) / len(trained),
            groups_trained=len(self.groups),
            groups_filtered=self.filtered,
            groups_stale=self.stale,
            groups_failed=self.failed,
            staleness_mean=sum(staleness) / len(staleness),
            staleness_max=max(staleness),
            wait_s=self.wait_s,
            extra=mean_extra_logs(seen),
            errors=dict(self.errors),
            learned=learned,
            shaped_reward=None if self.shaped is None else sum(self.shaped) / len(self.shaped),
            shaping=tuple(self.shaping_stats),
            queue_depth=queue_depth,
            step_s=timing.step_s,
            learn_s=timing.learn_s,
            sync_s=timing.sync_s,
            time_s=timing.time_s,
            tokens_per_s=timing.tokens_per_s,
            queued=timing.queued,
        )


class BatchAssembler:
    """Fills each learner step's batch from the cluster's queue, judging every group with
    `triage`; gives discarded groups' places back at once, and stops the run (through
    `control`) when its time is up or the groups it gets can never make a batch.

    Groups carried into the session (`carry`: from a checkpoint, or across a learner
    restart) are taken before the queue's. `untrained()` is every finished group not yet
    handed to the learner, for a checkpoint: the batch assembled and not yet `handed`, the
    one being filled, the carried ones, and the queue's, read at one moment (no take off the
    queue is half done then)."""

    def __init__(
        self,
        cfg: TrainConfig,
        cluster: Cluster,
        control: RunControl,
        *,
        out: Path,
        log: Callable[[str], None],
        on_idle: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.control = control
        self.out = out
        self.log = log
        self.on_idle = on_idle
        """Called while no group comes: raises what stopped them coming (a dead worker)."""
        self.clock = clock
        self.failed = FailedGroups()
        self.no_signal = NoSignal(cfg.algorithm, cfg.run.max_skipped_groups)
        self.shaping = RewardShaping(cfg.reward, cfg.rollout.max_reply_tokens)
        self._filling: Batch | None = None
        """A batch whose filling an error or a pause cut short (a dead worker): the next call
        goes on with it, so the groups in it are neither lost nor counted twice."""
        self._done: Batch | None = None
        """The batch last assembled, until it is handed to the learner."""
        self._carried: list[list[Trajectory]] = []
        self._taking = asyncio.Lock()
        """Held while groups are off the queue and not yet in a batch."""

    def carry(self, groups: list[list[Trajectory]], version: int) -> int:
        """Take `groups` (finished, untrained, from before this session) before the queue's,
        for a learner at policy `version`; how many are taken. A group sampled by a newer
        policy (one the learner, restarted from its checkpoint, never had) is counted stale
        in the first batch, never trained."""
        batch = self._filling = self._filling or Batch(shaping=self.shaping)
        for group in groups:
            if max_version(group) > version:
                batch.count(group, "stale")
            else:
                self._carried.append(group)
        return len(self._carried)

    def handed(self) -> None:
        """The batch last assembled went to the learner."""
        self._done = None

    async def untrained(self) -> list[list[Trajectory]]:
        """The finished groups not yet handed to the learner, oldest first as they will be
        trained: assembled, being filled, carried, queued."""
        async with self._taking:
            held = [g for b in (self._done, self._filling) if b is not None for g in b.groups]
            return [*held, *self._carried, *await self.cluster.queued()]

    async def assemble(
        self, version: int, deadline: float, *, paused: Callable[[], bool] = lambda: False
    ) -> Batch | None:
        """Take groups until `batch_groups` usable ones are in hand for the learner at policy
        `version`; None when the run stops first (its time is up while groups come slowly,
        say), or when `paused()` says so between two takes off the queue."""
        wanted = self.cfg.algorithm.batch_groups
        batch = self._filling = self._filling or Batch(shaping=self.shaping)
        while len(batch.groups) < wanted:
            if self.control.stopping or paused():
                return None
            if self.clock() >= deadline:
                minutes = f"reached max_minutes={self.cfg.run.max_minutes:g}"
                self.control.finish(StopReason("max_minutes", minutes))
                return None
            waited = self.clock()
            async with self._taking:
                got = await self._take(wanted - len(batch.groups))
                batch.wait_s += self.clock() - waited
                await self._judge(got, version, batch)
            if self._stopped_for_good(version):
                return None
        self._filling, self._done = None, batch
        return batch

    async def _take(self, most: int) -> list[list[Trajectory]]:
        if self._carried:
            got, self._carried = self._carried[:most], self._carried[most:]
            return got
        try:
            return await self.cluster.take_groups(most, timeout_s=1.0)
        except TimeoutError:
            self.on_idle()
            return []

    async def _judge(self, got: list[list[Trajectory]], version: int, batch: Batch) -> None:
        discarded = 0
        for group in got:
            verdict = triage(group, version, self.cfg.algorithm)
            self.failed.add(group)
            if notice := self.no_signal.add(group, verdict):
                self.log(notice)
            batch.count(group, verdict)
            discarded += verdict != "keep"
        if discarded:
            # Their places go back at once: rollouts must go on while the batch fills.
            await self.cluster.give_back(discarded)

    def _stopped_for_good(self, version: int) -> bool:
        """Stop the run on groups that can never make a batch: failed ones, or ones without
        signal, too many in a row."""
        if self.failed.in_a_row >= self.cfg.run.max_failed_groups:
            error = self.failed.error(self.cfg, self.out, version)
            reason = f"the last {self.failed.in_a_row} groups failed"
            self.control.fail(error, StopReason("failed_groups", reason))
            return True
        if self.no_signal.in_a_row >= self.no_signal.limit:
            error = self.no_signal.error(self.out, version)
            reason = f"the last {self.no_signal.in_a_row} groups carried no signal"
            self.control.fail(error, StopReason("no_signal", reason))
            return True
        return False
