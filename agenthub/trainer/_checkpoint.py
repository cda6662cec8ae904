"""Checkpoints: the learner's DeepSpeed states, the policy as a Hugging Face model, and the
typed state of the run at each one; and loading them back on `--resume`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from agenthub._errors import AgentHubError
from agenthub.agents import Trajectory
from agenthub.trainer._cluster import Cluster
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._rundir import MODEL, CheckpointState, RunDirectory

__all__ = ["Checkpointer"]


Untrained = Callable[[], Awaitable[list[list[Trajectory]]]]
"""The finished groups not yet trained, at the moment it is awaited."""


async def _none() -> list[list[Trajectory]]:
    return []


class Checkpointer:
    """Writes a checkpoint of the run into its directory, and restores one. A checkpoint
    keeps the finished groups not yet trained (`untrained`), so a resumed or restarted run
    trains them, or judges them stale, as it would have without the stop."""

    def __init__(
        self,
        cfg: TrainConfig,
        run: RunDirectory,
        cluster: Cluster,
        log: Callable[[str], None],
        untrained: Untrained = _none,
    ) -> None:
        self.cfg = cfg
        self.run = run
        self.cluster = cluster
        self.log = log
        self.untrained = untrained
        self.since: list[list[Trajectory]] = []
        """The groups handed to the learner since the last checkpoint: a learner restarted
        from it trains them again."""
        self.bf16 = False
        """Whether the learner trains in bf16, as it resolved `learner.bf16`."""

    async def save(self, step: int, elapsed_s: float) -> None:
        tag = f"step-{step}"
        await self.cluster.save_checkpoint(self.run.checkpoints, tag)
        if self.cfg.run.save_model:
            await self.cluster.save_model(self.run.model, {"step": step, "tag": tag})
        # The groups before the task positions: a group kept was drawn before them, so its
        # task is not played again.
        groups = await self.untrained()
        self.run.write_groups(tag, groups)
        stats = await self.cluster.worker_stats()
        # A dead worker's place in its task stream is its last checkpointed one: its tasks
        # since are played again.
        before = self.run.state()
        drawn = before.tasks_drawn if before else [0] * len(stats)
        state = CheckpointState(
            step=step,
            tag=tag,
            tasks_drawn=[drawn[i] if s is None else s.tasks_drawn for i, s in enumerate(stats)],
            elapsed_s=elapsed_s,
            samples_bytes=self.run.samples_size(),
            bf16=self.bf16,
            groups=len(groups),
        )
        self.run.write_state(state, keep=self.cfg.run.keep_checkpoints)
        self.since = []

    async def save_unless_saved(self, step: int, elapsed_s: float) -> None:
        """Checkpoint `step` unless the newest checkpoint holds it."""
        state = self.run.state()
        if state is None or state.step != step:
            await self.save(step, elapsed_s)

    async def restore(self, state: CheckpointState) -> None:
        """Load the learner's checkpoint `state` names, and save the run's config as resumed;
        refuses one the learner cannot take."""
        self.check_precision(state)
        steps = await self.cluster.load_checkpoint(self.run.checkpoints, state.tag)
        if steps != state.step:
            raise AgentHubError(
                f"checkpoint {state.tag} holds {steps} learner steps, state.json "
                f"says {state.step}; the checkpoint directory is inconsistent"
            )
        self.run.write_config(self.cfg)
        await self.export_again(state)

    async def export_again(self, state: CheckpointState) -> None:
        """`model/` is written just before the checkpoint's state.json: a run killed between
        the two left the policy of a step that no checkpoint kept, and the resumed run redoes
        that step. It is written again from the checkpoint the run resumed from."""
        if not self.cfg.run.save_model:
            return
        held = self.run.exported_step()
        if held == state.step:
            return
        await self.cluster.save_model(self.run.model, {"step": state.step, "tag": state.tag})
        if held is not None:
            self.log(f"{MODEL}/ held the policy of step {held}; written again from {state.tag}")

    def check_precision(self, state: CheckpointState) -> None:
        """DeepSpeed loads a checkpoint only in the precision it was written in: with
        `learner.bf16=null` that depends on the device the learner landed on."""
        if state.bf16 is None or state.bf16 == self.bf16:
            return
        asked = self.cfg.learner.bf16
        how = "as asked" if asked is not None else "chosen by its device, learner.bf16=null"
        raise AgentHubError(
            f"--resume: checkpoint {state.tag} was written by a learner training "
            f"{'in' if state.bf16 else 'without'} bf16, and this one trains "
            f"{'in' if self.bf16 else 'without'} it ({how}); resume with "
            f"learner.bf16={json.dumps(state.bf16)}"
        )

    async def save_after_failure(
        self, step: int, elapsed_s: float, sync: asyncio.Task[None] | None
    ) -> None:
        """Checkpoint the learner at `step` after a failure elsewhere, if that saves steps and
        the learner is idle. A weight sync into a dead engine fails (the learner's weights stay
        as they were) or hangs: it is given a while to end, and the learner left alone if not."""
        if step == self.run.checkpointed_step():
            return
        if sync is not None:
            await asyncio.wait({sync}, timeout=60)
            if not sync.done():
                self.log(f"could not checkpoint step {step}: the learner is still sending weights")
                return
        try:
            await asyncio.wait_for(self.save(step, elapsed_s), timeout=600)
        except Exception as exc:
            self.log(f"could not checkpoint step {step} after the failure: {exc!r}")
        else:
            self.log(f"checkpointed step {step} after the failure")
