"""What a training run writes as it goes: `metrics.jsonl`, wandb, and `reward.png`."""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agenthub._errors import AgentHubError
from agenthub.agents._run_dir import jsonl_lines

__all__ = [
    "MetricsLog",
    "ShapingStats",
    "StepRecord",
    "StepReport",
    "StepTiming",
    "plot_rewards",
    "read_metrics",
]


@dataclass(frozen=True)
class StepReport:
    """What the progress display shows after each learner step."""

    step: int
    max_steps: int
    reward: float
    tokens_per_s: float
    staleness: float
    queue_depth: int
    idle_fraction: float
    eval_reward: float | None = None


@dataclass(frozen=True)
class StepTiming:
    """How long a learner step took, and the run's time and token rate at its end."""

    step_s: float
    learn_s: float
    sync_s: float
    """How long the last finished weight sync took."""
    time_s: float
    tokens_per_s: float
    queued: bool = False
    """Whether the step went to the learner behind the last weight sync (its batch ready as
    the step before ended), with no wait for the driver between the two."""


ShapingRule = Literal["overlong", "unstopped", "clipped"]


@dataclass(frozen=True)
class ShapingStats:
    """What one reward-shaping rule (`reward.*`) did to the episodes trained on in a step."""

    rule: ShapingRule
    """`overlong`: a reply went into the overlong buffer; `unstopped`: a reply was cut at its
    token limit; `clipped`: the sequence's reward after its group's baseline lay outside
    `reward.clip_range`."""
    samples: int
    """How many episodes the rule applied to."""
    change: float
    """The mean size of the change to their reward (to their baselined reward, for `clipped`):
    how far the rule moved them; 0 for none."""


@dataclass(frozen=True)
class StepRecord:
    """The metrics of one learner step, as one line of `metrics.jsonl`."""

    step: int
    train_reward: float
    """Mean reward of every episode seen for the step (neither stale nor failed)."""
    train_score: float
    trained_reward: float
    """Mean reward of the episodes trained on."""
    generated_tokens: int
    mean_turns: float
    groups_trained: int
    groups_filtered: int
    groups_stale: int
    groups_failed: int
    staleness_mean: float
    staleness_max: int
    queue_depth: int
    step_s: float
    learn_s: float
    wait_s: float
    """How long the learner waited for groups."""
    sync_s: float
    """How long the last finished weight sync took."""
    time_s: float
    tokens_per_s: float
    queued: bool = False
    """Whether the step went to the learner behind the last weight sync (`StepTiming`)."""
    extra: dict[str, float] = field(default_factory=dict)
    """An env's own numbers (OpenRLHF's extra_logs): the mean over the episodes logging each."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failed episodes by cause."""
    learned: dict[str, float] = field(default_factory=dict)
    """The learner's own metrics (loss, KL, ...)."""
    shaped_reward: float | None = None
    """Mean reward of the episodes trained on after the length penalties (None: none is on)."""
    shaping: tuple[ShapingStats, ...] = ()
    """What each reward-shaping rule that is on did (`train/shaping/<rule>_samples`, `_change`)."""

    @property
    def idle_fraction(self) -> float:
        return self.wait_s / self.step_s if self.step_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "step": self.step,
            "train/reward": self.train_reward,
            "train/score": self.train_score,
            "train/trained_reward": self.trained_reward,
            "train/generated_tokens": self.generated_tokens,
            "train/mean_turns": self.mean_turns,
            "groups/trained": self.groups_trained,
            "groups/filtered": self.groups_filtered,
            "groups/stale": self.groups_stale,
            "groups/failed": self.groups_failed,
            "staleness/mean": self.staleness_mean,
            "staleness/max": self.staleness_max,
            "queue_depth": self.queue_depth,
            "learner/step_s": self.step_s,
            "learner/learn_s": self.learn_s,
            "learner/wait_s": self.wait_s,
            "learner/idle_fraction": self.idle_fraction,
            "learner/sync_s": self.sync_s,
            "learner/queued": int(self.queued),
        }
        if self.shaped_reward is not None:
            record["train/shaped_reward"] = self.shaped_reward
        for stats in self.shaping:
            record[f"train/shaping/{stats.rule}_samples"] = stats.samples
            record[f"train/shaping/{stats.rule}_change"] = stats.change
        record.update({f"train/extra/{k}": v for k, v in self.extra.items()})
        record.update({f"errors/{cause}": n for cause, n in self.errors.items()})
        record.update({f"learner/{k}": v for k, v in self.learned.items()})
        return {**record, "time_s": self.time_s, "tokens_per_s": self.tokens_per_s}

    def report(self, max_steps: int, eval_reward: float | None) -> StepReport:
        return StepReport(
            step=self.step,
            max_steps=max_steps,
            reward=self.train_reward,
            tokens_per_s=self.tokens_per_s,
            staleness=self.staleness_mean,
            queue_depth=self.queue_depth,
            idle_fraction=self.idle_fraction,
            eval_reward=eval_reward,
        )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a `metrics.jsonl` (a last line cut off by a crash is skipped);
    `AgentHubError` for another line that is not a JSON record."""
    records = []
    for line in jsonl_lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            record = exc
        if not isinstance(record, dict):
            raise AgentHubError(
                f"{path} holds a line that is not a metrics record ({line[:60]!r}); delete "
                "that line, or move the file away, and run again"
            )
        records.append(record)
    return records


def plot_rewards(records: list[dict[str, Any]], out: Path, title: str) -> None:
    """Train reward per step (with a moving average) and held-out reward at each evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["train/reward"]) for r in records if "train/reward" in r]
    held = [(r["step"], r["eval/reward"]) for r in records if "eval/reward" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if train:
        steps, rewards = zip(*train, strict=True)
        ax.plot(steps, rewards, color="tab:blue", alpha=0.3, lw=1, label="train (per step)")
        window = min(len(rewards), max(5, len(rewards) // 10))
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1])
            / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        ax.plot(steps, smooth, color="tab:blue", lw=2, label=f"train (mean of {window})")
    if held:
        steps, rewards = zip(*held, strict=True)
        ax.plot(steps, rewards, "o-", color="tab:orange", lw=2, label="held-out")
    ax.set_xlabel("learner step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if train or held:
        ax.legend(loc="lower right")
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)


def _wandb_mode(choice: str) -> str:
    if choice != "auto":
        return choice
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE"):
        return os.environ.get("WANDB_MODE", "online")
    netrc = Path.home() / ".netrc"
    if netrc.exists() and "api.wandb.ai" in netrc.read_text(encoding="utf-8", errors="replace"):
        return "online"
    return "offline"


class MetricsLog:
    """Appends one JSON record per call to `metrics.jsonl`, mirrors it to wandb, and redraws
    `reward.png` when asked, in a thread of its own: drawing (and matplotlib's first import,
    most of a second) does not hold up the driver's loop, draws are made one at a time in the
    order asked, and `close` waits for them."""

    def __init__(
        self, directory: Path, *, title: str, wandb: str, config: dict[str, Any], resume: bool
    ) -> None:
        self.directory = directory
        self.path = directory / "metrics.jsonl"
        self.title = title
        self._file = self.path.open("a", encoding="utf-8")
        self._plotter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agenthub-plot")
        self._drawn: list[Future[None]] = []
        self._wandb: Any = None
        mode = _wandb_mode(wandb)
        if mode != "disabled":
            import wandb as wandb_lib

            run_id_file = directory / "wandb_run_id"
            run_id = run_id_file.read_text().strip() if run_id_file.exists() else None
            self._wandb = wandb_lib.init(
                project="agenthub",
                name=directory.name,
                dir=str(directory),
                config=config,
                mode=mode,  # type: ignore[arg-type]
                id=run_id,
                resume="allow" if resume else None,
            )
            run_id_file.write_text(self._wandb.id)

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if k != "step"}, step=clean["step"])

    def plot(self) -> None:
        """Redraw `reward.png` from `metrics.jsonl` (what is written of it when the draw
        starts); raises the error of an earlier draw that failed (a full disk, say)."""
        self._raise_failed()
        self._drawn.append(self._plotter.submit(self._draw))

    def _draw(self) -> None:
        plot_rewards(read_metrics(self.path), self.directory / "reward.png", self.title)

    def _raise_failed(self) -> None:
        done = [f for f in self._drawn if f.done()]
        self._drawn = [f for f in self._drawn if not f.done()]
        for future in done:
            future.result()

    def close(self) -> None:
        """Wait for the draws asked for, and close the file and wandb; raises the error of a
        draw that failed, once everything is closed."""
        self._plotter.shutdown(wait=True)
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        self._raise_failed()
