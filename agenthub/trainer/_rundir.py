"""A training run's directory: its files, its lock, and the typed state of its newest checkpoint."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agenthub._errors import AgentHubError
from agenthub.agents._run_dir import locked as hold
from agenthub.agents._run_dir import write_atomic
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._learner import MODEL_CHECKPOINT
from agenthub.trainer._metrics import read_metrics

if TYPE_CHECKING:
    from agenthub.agents import Trajectory

__all__ = ["CheckpointState", "RunDirectory", "disk_full"]

STATE = "state.json"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
MODEL = "model"  # the policy as a Hugging Face model, written with each checkpoint
SAMPLES = "trajectories.jsonl"  # trajectories of each step, `run.save_trajectories` of them
PROCESSES = "logs/processes.json"  # the learner's and rollout workers' process ids
GROUPS = "groups.jsonl"  # in a checkpoint: its finished, untrained groups, one a line

_CHECKPOINT_BOUND = (
    "model",
    "learner.zero_stage",
    "learner.bf16",
    "ray.rollout_workers",
    "ray.learner_ranks",
)
"""Settings a checkpoint is written for: DeepSpeed loads its states only into the same model,
ZeRO stage, precision and number of ranks, and each rollout worker keeps its own place in the
tasks."""
_BEFORE_THE_SETTING = {"ray.learner_ranks": 1}
"""What a run that predates a setting had: its config does not name it."""


class CheckpointState(BaseModel):
    """`checkpoints/state.json`: the newest complete checkpoint and where the run stood at it.
    Fields a checkpoint of an older version did not record are None."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: int
    tag: str
    tasks_drawn: list[int]
    """How many training tasks each rollout worker had drawn."""
    elapsed_s: float = 0.0
    samples_bytes: int | None = None
    """The size of trajectories.jsonl then, to rewind it to."""
    bf16: bool | None = None
    """Whether the learner trained in bf16, as it resolved `learner.bf16`."""
    history: list[str] = []
    """The tags of the checkpoints kept, oldest first."""
    groups: int | None = None
    """The finished groups not yet trained then, kept in the checkpoint (`RunDirectory.groups`)."""


class RunDirectory:
    """The files of one run: `config.json`, `metrics.jsonl`, `trajectories.jsonl` samples,
    `checkpoints/` (DeepSpeed's, plus `state.json` naming the newest complete one),
    `model/` (the policy at the newest checkpoint, as a Hugging Face model) and `reward.png`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / CHECKPOINTS
        self.metrics = path / METRICS
        self.model = path / MODEL
        self.processes = path / PROCESSES

    def save_samples(self, groups: list[list[Trajectory]], n: int) -> None:
        """Append the first `n` trajectories of a step's `groups` to `trajectories.jsonl`."""
        if not n:
            return
        with (self.path / SAMPLES).open("a", encoding="utf-8") as sink:
            for t in [t for group in groups for t in group][:n]:
                sink.write(t.model_dump_json() + "\n")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory for one run: a second run on it (a `--resume` while the first
        still trains) would interleave both runs' logs and checkpoints. The lock is eval's too."""
        with hold(self.path, command="train"):
            yield

    def prepare(
        self, config: TrainConfig, *, resume: bool, log: Callable[[str], None]
    ) -> CheckpointState | None:
        """Make the directory ready for a run with `config`: a new run's config written, a
        resumed run's logs rewound to its checkpoint; returns that checkpoint's state (None to
        start from step 0). Refuses a directory that is not a run's, a new run over an old one,
        and a resume that changes what its checkpoint needs."""
        saved = self.saved_config()  # a directory not a run's is refused, not overwritten
        state = self.checked_state()
        if resume and state is not None and saved is not None:
            check_resumable(self.path, saved, state, config)
        if resume and state is None:
            # Stopped before its first checkpoint (killed, or Ctrl-C twice): the start is the
            # last state it can go back to, so it starts again in the same directory.
            log(
                f"{self.path} has no checkpoint yet (the run stopped before its first one); "
                "starting it again from step 0"
            )
            self.discard_logs()
            shutil.rmtree(self.checkpoints, ignore_errors=True)  # a first one cut off
        elif not resume and (state is not None or self.metrics.exists()):
            raise AgentHubError(
                f"{self.path} already holds a training run; pass --resume to continue it, "
                "or choose another --out"
            )
        if state is not None:
            self.rewind_logs(state)
        else:  # a resumed run's config is saved once its checkpoint has loaded
            self.write_config(config)
        return state

    def saved_config(self) -> dict[str, Any] | None:
        """The run's config.json, None without one; `AgentHubError` for one that is not a
        training run's (a model directory's, say)."""
        file = self.path / CONFIG
        if not file.exists():
            return None
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise AgentHubError(f"{file} is not JSON ({exc}); {self.path} holds no run") from None
        if not isinstance(config, dict) or "env" not in config:
            raise AgentHubError(
                f"{file} is not a training run's config (a model directory?); give --out a "
                "directory of agenthub train's own"
            )
        return config

    def checked_state(self) -> CheckpointState | None:
        """`state()`, refusing a run directory whose checkpoints do not match it: checkpoints
        without the state.json that names the newest complete one, or a newest one gone."""
        state = self.state()
        saved = sorted(p.name for p in self.checkpoints.glob("step-*") if p.is_dir())
        # One checkpoint without a state.json is a first one cut off while it was written
        # (state.json is written last); two mean that state.json was lost.
        if state is None and len(saved) > 1:
            raise AgentHubError(
                f"{self.checkpoints} holds checkpoints ({', '.join(saved)}) but no {STATE}, "
                "which names the newest complete one; put it back, or move checkpoints/ "
                "away to start the run again from step 0"
            )
        if state is not None and state.tag not in saved:
            older = [tag for tag in state.history if tag in saved]
            also = f" ({', '.join(older)} remain)" if older else ""
            raise AgentHubError(
                f"{self.checkpoints / state.tag}, the newest checkpoint {STATE} names, is "
                f"gone{also}; restore it, or move checkpoints/ away to start again from step 0"
            )
        return state

    def state(self) -> CheckpointState | None:
        """The newest checkpoint's state, None before the first; `AgentHubError` for a
        state.json that is not one (cut off, edited, or another program's)."""
        file = self.checkpoints / STATE
        if not file.exists():
            return None
        try:
            return CheckpointState.model_validate_json(file.read_bytes())
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise AgentHubError(
                f"{file} is not the state of a checkpoint ({where + ': ' if where else ''}"
                f"{error['msg']}); put back the state.json agenthub train wrote, or move "
                "checkpoints/ away to start the run again from step 0"
            ) from None

    def checkpointed_step(self) -> int:
        """The step of the newest complete checkpoint; 0 before the first."""
        state = self.state()
        return state.step if state else 0

    def how_to_go_on(self) -> str:
        """The sentence that tells a user of a stopped run how to continue it."""
        command = f"agenthub train --out {self.path} --resume"
        try:
            state = self.state()
        except (OSError, AgentHubError):
            return f"Continue it with {command}"
        if state is None:
            return f"It has no checkpoint yet: {command} starts it again from step 0"
        return f"It is checkpointed at step {state.step}: continue it with {command}"

    def write_config(self, config: TrainConfig) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / CONFIG, config.model_dump_json(indent=2) + "\n")

    def samples_size(self) -> int:
        """Bytes in trajectories.jsonl: a checkpoint records it, to rewind the file to."""
        path = self.path / SAMPLES
        return path.stat().st_size if path.exists() else 0

    def rewind_logs(self, state: CheckpointState) -> None:
        """Forget what was logged after the checkpoint `state` names (a run killed between
        checkpoints logged steps it will take again when resumed): metrics of later steps, and
        sample trajectories written after it (their size then, in checkpoints of this version;
        older ones did not record it, and their samples stay)."""
        if self.metrics.exists():
            kept = [r for r in read_metrics(self.metrics) if r.get("step", 0) <= state.step]
            write_atomic(self.metrics, "".join(json.dumps(r) + "\n" for r in kept))
        size = state.samples_bytes
        if size is not None and self.samples_size() > size:
            with (self.path / SAMPLES).open("r+b") as samples:
                samples.truncate(size)

    def discard_logs(self) -> None:
        """Delete what the run logged (metrics, sample trajectories, the reward plot, its wandb
        run's id), for a run that starts again from step 0."""
        for name in (METRICS, SAMPLES, "reward.png", "wandb_run_id"):
            (self.path / name).unlink(missing_ok=True)

    def exported_step(self) -> int | None:
        """The step of the policy in `model/`, None if there is none (or it says not)."""
        try:
            about = json.loads((self.model / MODEL_CHECKPOINT).read_text(encoding="utf-8"))
            return int(about["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_groups(self, tag: str, groups: list[list[Trajectory]]) -> None:
        """Keep checkpoint `tag`'s finished, untrained groups in it (before its state.json
        names it: a checkpoint is whole with its groups, or not there)."""
        lines = ("[" + ",".join(t.model_dump_json() for t in g) + "]\n" for g in groups)
        write_atomic(self.checkpoints / tag / GROUPS, "".join(lines))

    def groups(self, state: CheckpointState) -> list[list[Trajectory]]:
        """The finished, untrained groups checkpoint `state` kept (none for one of a version
        that kept none)."""
        from pydantic import TypeAdapter

        from agenthub.agents import Trajectory

        file = self.checkpoints / state.tag / GROUPS
        if not state.groups or not file.exists():
            return []
        group = TypeAdapter(list[Trajectory])
        return [group.validate_json(line) for line in file.read_text().splitlines() if line]

    def write_state(self, state: CheckpointState, keep: int) -> None:
        """Record a complete checkpoint as the newest, then delete all but the `keep` newest."""
        before = self.state()
        history = [*(before.history if before else []), state.tag]
        state = state.model_copy(update={"history": history[-keep:]})
        text = json.dumps(state.model_dump(exclude_none=True), indent=2) + "\n"
        write_atomic(self.checkpoints / STATE, text)
        for old in history[:-keep]:
            shutil.rmtree(self.checkpoints / old, ignore_errors=True)


def check_resumable(
    run: Path, saved: dict[str, Any], state: CheckpointState, config: TrainConfig
) -> None:
    """Refuse, before anything starts, a resume that changes what its checkpoint depends on
    (it would fail in DeepSpeed's loader half a minute later). Precision is compared as the
    learner resolved it (`bf16` in the state; `learner.bf16=null` means by the device), once
    the learner has started, in checkpoints that record it."""
    new = config.model_dump(mode="json")
    bound = [k for k in _CHECKPOINT_BOUND if not (k == "learner.bf16" and state.bf16 is not None)]
    changed = [key for key in bound if _saved(saved, key) != _dotted(new, key)]
    estimator = _dotted(saved, "algorithm.estimator")
    if (estimator == "gae") != (config.algorithm.estimator == "gae"):  # a critic, or none
        changed.append("algorithm.estimator")
    if changed:
        was = ", ".join(f"{key}={json.dumps(_saved(saved, key))}" for key in changed)
        raise AgentHubError(
            f"--resume: the checkpoints in {run} were written with {was}, which they need to "
            "load; resume with the same (drop the change), or start a new run with another --out"
        )


def disk_full(path: Path, below: int = 256 << 20) -> str | None:
    """What to say when the disk holding `path` has less than `below` bytes free (a
    checkpoint is the model's weights and optimizer states): None when it has more."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    if free >= below:
        return None
    return (
        f"the disk holding {path} is full ({free >> 20} MB free); free space there and resume "
        f"with agenthub train --out {path} --resume"
    )


def _saved(tree: dict[str, Any], key: str) -> Any:
    value = _dotted(tree, key)
    return _BEFORE_THE_SETTING.get(key) if value is None else value


def _dotted(tree: dict[str, Any], key: str) -> Any:
    value: Any = tree
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
