"""What a training run writes as it goes: `metrics.jsonl`, wandb, and `reward.png`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MetricsLog", "plot_rewards", "read_metrics"]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a `metrics.jsonl` (a line cut off by a crash is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
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
    `reward.png` when asked."""

    def __init__(
        self, directory: Path, *, title: str, wandb: str, config: dict[str, Any], resume: bool
    ) -> None:
        self.directory = directory
        self.path = directory / "metrics.jsonl"
        self.title = title
        self._file = self.path.open("a", encoding="utf-8")
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
        plot_rewards(read_metrics(self.path), self.directory / "reward.png", self.title)

    def close(self) -> None:
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
