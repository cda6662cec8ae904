"""`TrainConfig`: everything `agenthub train` does, as one typed tree.

A run is configured by sparse TOML files (only what differs from the defaults) and `key=value`
overrides with dotted keys (`learner.lr=3e-4`, `rollout.temperature=0.8`); the resolved tree is
written to the run directory as `config.json` so a run can always be reproduced and resumed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, ValidationError, model_validator

from agenthub._errors import AgentHubError
from agenthub._pairs import parse_pair
from agenthub.trainer._learner_config import CriticConfig, LearnerConfig
from agenthub.trainer._section import ConfigSection
from agenthub.trainer._shaping import RewardConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "HeldOutConfig",
    "RayConfig",
    "RolloutSettings",
    "RunConfig",
    "TrainConfig",
    "load_config",
]


class ConfigError(AgentHubError):
    """A configuration file or override that does not fit `TrainConfig`."""


class RolloutSettings(ConfigSection):
    """How training episodes are played."""

    n_samples_per_prompt: int = Field(8, ge=1)
    """Episodes per task; a task's episodes form one group for group-based advantages."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of training episodes."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling of training episodes."""
    max_reply_tokens: int = Field(160, ge=1)
    """Tokens per model reply."""
    stop: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    """Strings that end a reply once it writes one (kept in the reply), besides the env's own
    `stop`; held-out evaluation uses them too."""
    max_turns: int | None = Field(None, ge=1)
    """Replies per episode; an episode still going after that is truncated. Unset, the env
    decides when its episodes end (within `max_tokens`)."""
    chat_template: bool = True
    """Render prompts through the tokenizer's chat template; false tokenizes text prompts as
    they are (prompts already templated, base models)."""
    max_tokens: int | None = Field(None, ge=2)
    """Longest token sequence of an episode (default: the model's context)."""
    concurrency: int = Field(32, ge=1)
    """Episodes in flight per rollout worker."""
    env_step_timeout_s: float = Field(300.0, gt=0)
    """An env `reset` or `step` slower than this ends the episode as `env_timeout` (room for a
    remote judge's retries: 4 attempts of up to 60 s each by default)."""
    generate_timeout_s: float = Field(300.0, gt=0)
    """A generation slower than this ends the episode as `generation_timeout`."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs each rollout worker's vLLM engine is split over (tensor parallel), all on one
    node; the worker then holds that many (`ray.worker_num_gpus`, set to it when not given).
    GPUs only: a run asking for more than 1 on a machine without GPUs, or more than the most
    GPUs a node of the Ray cluster has, is refused at its start."""
    weight_update: Literal["keep", "drain"] = "keep"
    """How each weight sync treats the replies the engines are generating. `keep` pauses them
    where they are, loads the new weights, and goes on (in-flight weight updates, as
    PipelineRL and AReaL do): a reply may then hold tokens of two policy versions, each with
    the logprob it was sampled with, and counts as the older for staleness. `drain` lets them
    finish on the old weights first, which holds the learner for the slowest reply of every
    engine on each sync."""


class AlgorithmConfig(ConfigSection):
    """What is learned from each batch."""

    estimator: Literal[
        "group_norm", "dr_grpo", "rloo", "reinforce", "reinforce_baseline", "gae"
    ] = "group_norm"
    """Advantage estimator over each group's rewards (see agenthub.trainer.advantages), or
    `gae`: PPO with a critic, per-token advantages from a value model (`learner.critic`)."""
    advantage_std_norm: bool = True
    """`reinforce` and `reinforce_baseline`: divide the advantages by their standard deviation
    over the batch's model tokens after subtracting their mean, as OpenRLHF does by default;
    false only subtracts the mean (OpenRLHF's `--algo.advantage.no_std_norm`). The other
    estimators are not whitened over the batch (`gae`: see `learner.critic.whiten`)."""
    batch_groups: int = Field(8, ge=1)
    """Groups (a task and its n_samples_per_prompt episodes) per learner step."""
    max_staleness: int = Field(1, ge=0)
    """Never train on a trajectory generated more than this many policy versions ago. 0 is
    synchronous training: rollouts wait for every learner step."""
    filter_groups: bool = True
    """Dynamic filtering: skip groups whose scores are all equal (they carry no signal)."""
    filter_low: float | None = None
    """With filtering, keep only groups whose mean score is at least this (None: no bound;
    scores are the env's own, which need not lie in [0, 1])."""
    filter_high: float | None = None
    """With filtering, keep only groups whose mean score is at most this (None: no bound)."""

    @model_validator(mode="after")
    def _check_range(self) -> AlgorithmConfig:
        if (
            self.filter_low is not None
            and self.filter_high is not None
            and self.filter_low > self.filter_high
        ):
            raise ValueError(
                f"filter_low {self.filter_low} is above filter_high {self.filter_high}"
            )
        return self


class HeldOutConfig(ConfigSection):
    """Periodic evaluation on held-out tasks with the current policy."""

    every: int = Field(5, ge=0)
    """Evaluate every this many learner steps (and before the first and after the last);
    0 turns evaluation off."""
    split: str = "held_out"
    """The env's task split to evaluate on."""
    tasks: int = Field(32, ge=1)
    """Held-out tasks per evaluation (the same tasks each time)."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of evaluation episodes; the reward is the mean over them."""
    samples_per_task: int = Field(2, ge=1)
    """Episodes per held-out task."""


class RunConfig(ConfigSection):
    """How long the run is and what it keeps."""

    max_steps: int = Field(200, ge=1)
    """Learner steps to take in all (a resumed run continues towards the same number)."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop after this much wall time of training (checkpointing first), even before
    `max_steps`."""
    checkpoint_every: int = Field(20, ge=1)
    """Save a checkpoint every this many steps (and when the run stops)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept on disk; older ones are deleted."""
    save_model: bool = True
    """With each checkpoint, write the policy as a Hugging Face model directory to `model/`
    in the run directory (for `agenthub eval --model`, vLLM or transformers)."""
    save_trajectories: int = Field(4, ge=0)
    """Trajectories of each step appended to trajectories.jsonl as samples."""
    max_failed_groups: int = Field(32, ge=1)
    """Stop the run (checkpointing first) with an error when this many groups in a row end
    with an episode in error: a broken environment or engine, not bad luck."""
    max_skipped_groups: int | None = Field(None, ge=1)
    """Stop the run (checkpointing first) with an error when this many groups in a row carry
    no signal (dynamic filtering skips them): without a step the policy does not change, so
    more of the same groups would not either. None: 32 batches' worth (`algorithm.batch_groups`
    x 32)."""
    wandb: Literal["auto", "online", "offline", "disabled"] = "auto"
    """Weights & Biases: `auto` logs online when credentials are set up, offline otherwise."""
    seed: int = 0
    """Seed of task order, env resets and sampling."""
    max_worker_restarts: int = Field(3, ge=0)
    """Rollout workers whose process dies (the OOM killer, a crash in native code) are
    replaced, their episodes in flight dropped, up to this many times in any hour; one more
    stops the run (checkpointing first) with the cause. 0: a lost worker stops the run."""
    max_learner_restarts: int = Field(2, ge=0)
    """A learner whose process dies is restarted from the last checkpoint (the steps since are
    taken again; from step 0 before the first checkpoint), up to this many times in the run's
    session; one more stops the run with the cause. 0: a lost learner stops the run."""
    worker_placement_timeout_s: float = Field(120.0, gt=0)
    """How long a lost rollout worker's replacement may wait for room in the Ray cluster (a
    CPU, and `ray.worker_num_gpus` GPUs). Past it, as when the node the worker ran on is gone
    and no other node has room, its place is given up and the run goes on with the workers it
    has; with none left, it stops (checkpointing first) with the cause."""


_RAY_OWN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


_RAY_OWN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


class RayConfig(ConfigSection):
    """Where the run's parts are placed."""

    address: str | None = None
    """A Ray cluster to join (`ray://host:10001`, `auto`); default: start Ray in-process."""
    rollout_workers: int = Field(1, ge=1)
    """Rollout workers, each with its own inference engine."""
    worker_num_gpus: float = Field(0.0, ge=0)
    """GPUs reserved for each rollout worker's engine. When this and `learner_num_gpus` are
    whole GPUs (1 or more), weights sync GPU to GPU over NCCL (over CUDA IPC with `colocate`);
    otherwise over gloo. An engine split over GPUs (`rollout.tensor_parallel_size` above 1)
    holds exactly that many, and this is set to it when not given."""
    learner_num_gpus: float = Field(0.0, ge=0)
    """GPUs reserved for each learner rank."""
    learner_ranks: int = Field(1, ge=1)
    """Data-parallel ranks of the learner (DeepSpeed over gloo on CPU, NCCL on GPUs), each a
    Ray actor in one placement group. The micro-batches of every batch
    (`learner.micro_batch_size` sequences each) are shared out among the ranks by tokens, so N
    ranks take the step one rank takes, to fp32 rounding; a batch of fewer micro-batches than
    ranks leaves some ranks idle. `learner.zero_stage` 1-3 shards the optimizer state,
    gradients and weights across them. Checkpoints then hold one optimizer shard per rank
    and resume with the same number of ranks. On GPUs each rank needs a whole GPU
    (`learner_num_gpus` >= 1); the Ray cluster must have a CPU (and those GPUs) for every
    rank, or the run is refused."""
    learner_resources: dict[str, float] = Field(default_factory=dict)
    """Ray custom resources each learner rank asks for, e.g. `{"learner_node": 1}` to place
    the learner on the node started with `ray start --resources='{"learner_node": 1}'`."""
    worker_resources: dict[str, float] = Field(default_factory=dict)
    """Ray custom resources each rollout worker asks for (as `learner_resources`)."""
    learner_threads: int = Field(1, ge=1)
    """CPU threads of the learner's torch ops."""
    worker_threads: int = Field(1, ge=1)
    """CPU threads of each rollout worker's engine (on CPU machines)."""
    colocate: bool = False
    """The learner and the rollout engine share one GPU (a "hybrid engine"): between rollout
    phases the engine sleeps (vLLM's level 2: its weights and KV cache freed), the learner
    steps, the engine wakes and takes the new weights over CUDA IPC. Needs one GPU on the node
    (`CUDA_VISIBLE_DEVICES` makes one of several the only one); one learner rank and one
    rollout worker, which take half of it each unless `learner_num_gpus` / `worker_num_gpus`
    say otherwise (together at most 1). See docs/train.md, "Weights GPU to GPU, and the
    colocated engine"."""

    @model_validator(mode="after")
    def _custom_resources(self) -> RayConfig:
        for name, resources in (
            ("learner", self.learner_resources),
            ("worker", self.worker_resources),
        ):
            for key, amount in resources.items():
                if key in _RAY_OWN_RESOURCES:
                    raise ValueError(
                        f"ray.{name}_resources names {key!r}, which Ray counts itself; give "
                        f"GPUs with ray.{name}_num_gpus and keep {name}_resources for custom "
                        'resources (`{"my_node": 1}`)'
                    )
                if not amount > 0:
                    raise ValueError(
                        f"ray.{name}_resources[{key!r}] is {amount:g}; an amount of a custom "
                        "resource must be above 0"
                    )
        return self

    @model_validator(mode="after")
    def _whole_gpus_per_rank(self) -> RayConfig:
        # NCCL cannot join two ranks on one GPU, which shares of a GPU may put them on.
        if self.learner_ranks > 1 and 0 < self.learner_num_gpus < 1:
            raise ValueError(
                f"ray.learner_ranks={self.learner_ranks} with ray.learner_num_gpus="
                f"{self.learner_num_gpus:g}: the ranks of a learner on GPUs reduce over NCCL, "
                "which needs a whole GPU per rank; set ray.learner_num_gpus=1 (or 0 for CPU)"
            )
        return self

    @model_validator(mode="after")
    def _one_shared_gpu(self) -> RayConfig:
        if not self.colocate:
            return self
        if self.learner_ranks != 1 or self.rollout_workers != 1:
            raise ValueError(
                f"ray.colocate shares one GPU between one learner rank and one rollout worker, "
                f"but ray.learner_ranks={self.learner_ranks} and ray.rollout_workers="
                f"{self.rollout_workers}: set both to 1, or ray.colocate=false to give the "
                "learner and the engines GPUs of their own"
            )
        learner = self.learner_num_gpus or 0.5
        worker = self.worker_num_gpus or 0.5
        if learner + worker > 1:
            raise ValueError(
                f"ray.colocate puts the learner (ray.learner_num_gpus={learner:g}) and the "
                f"engine (ray.worker_num_gpus={worker:g}) on one GPU, so the two must add up "
                "to at most 1; leave them unset for half each"
            )
        object.__setattr__(self, "learner_num_gpus", learner)
        object.__setattr__(self, "worker_num_gpus", worker)
        return self


class TrainConfig(ConfigSection):
    """The whole run. Every field has a default that trains the embedded model."""

    env: str
    """Environment id (see `agenthub envs list`)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Arguments for the environment's constructor."""
    model: str = "default"
    """A local Hugging Face model directory, or `default` for the embedded default model."""
    rollout: RolloutSettings = RolloutSettings()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    learner: LearnerConfig = LearnerConfig()
    """The learner; `learner.lr`, when not given, is 2e-4 for the embedded default model (3.5M
    parameters) and 1e-6 for any other model."""
    eval: HeldOutConfig = HeldOutConfig()
    run: RunConfig = RunConfig()
    ray: RayConfig = RayConfig()
    reward: RewardConfig = RewardConfig()

    @model_validator(mode="after")
    def _critic_for_gae(self) -> TrainConfig:
        gae = self.algorithm.estimator == "gae"
        if gae and self.learner.critic is None:
            learner = self.learner.model_copy(update={"critic": CriticConfig()})
            object.__setattr__(self, "learner", learner)
        elif not gae and self.learner.critic is not None:
            raise ValueError(
                f"learner.critic is set but algorithm.estimator is {self.algorithm.estimator!r}; "
                "the critic is trained only with algorithm.estimator=gae"
            )
        return self

    @model_validator(mode="after")
    def _groups_of_one(self) -> TrainConfig:
        # Said now rather than found after start-up: a run that trains on nothing, or waits
        # forever for a group it may train on.
        if self.rollout.n_samples_per_prompt > 1:
            return self
        fix = "give rollout.n_samples_per_prompt of 2 or more"
        if self.algorithm.filter_groups:
            raise ValueError(
                "algorithm.filter_groups skips groups whose scores are all equal, which a group "
                f"of one sample always is: no step would ever come; {fix}, or set "
                "algorithm.filter_groups=false"
            )
        if self.algorithm.estimator in ("group_norm", "dr_grpo", "rloo", "reinforce_baseline"):
            raise ValueError(
                f"algorithm.estimator={self.algorithm.estimator} measures each sample against "
                "the other samples of its task, and with rollout.n_samples_per_prompt=1 there "
                f"are none (every advantage would be 0); {fix}, or use "
                "algorithm.estimator=reinforce or gae"
            )
        return self

    @model_validator(mode="after")
    def _gpus_per_engine(self) -> TrainConfig:
        # The engine's ranks are processes of the worker's actor, one per GPU Ray gave it.
        split = self.rollout.tensor_parallel_size
        if split == 1:
            return self
        if "worker_num_gpus" not in self.ray.model_fields_set:
            ray = self.ray.model_copy(update={"worker_num_gpus": float(split)})
            ray.model_fields_set.add("worker_num_gpus")
            object.__setattr__(self, "ray", ray)
        elif self.ray.worker_num_gpus != split:
            raise ValueError(
                f"rollout.tensor_parallel_size={split} with ray.worker_num_gpus="
                f"{self.ray.worker_num_gpus:g}: each of an engine's {split} ranks runs on a GPU "
                f"of its rollout worker's own, so a worker holds exactly {split}; set "
                f"ray.worker_num_gpus={split}, or leave it out"
            )
        return self

    @model_validator(mode="after")
    def _default_lr(self) -> TrainConfig:
        if "lr" not in self.learner.model_fields_set:
            lr = DEFAULT_MODEL_LR if self.model == "default" else MODEL_LR
            learner = self.learner.model_copy(update={"lr": lr})
            learner.model_fields_set.add("lr")
            object.__setattr__(self, "learner", learner)
        return self

    @model_validator(mode="after")
    def _overlong_buffer_fits(self) -> TrainConfig:
        buffer, longest = self.reward.overlong_buffer_len, self.rollout.max_reply_tokens
        if buffer is not None and buffer > longest:
            raise ValueError(
                f"reward.overlong_buffer_len={buffer} is longer than a reply may be "
                f"(rollout.max_reply_tokens={longest}): the buffer is the last tokens before "
                "that limit; give a shorter buffer or longer replies"
            )
        return self


DEFAULT_MODEL_LR = 2e-4
"""Learning rate for the embedded default model: small models take large steps."""
MODEL_LR = 1e-6
"""Learning rate for any other model, when none is given: safe for billion-parameter models."""


def _problem(err: Any) -> str:
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "value_error":  # one of the validators' own messages: it names its keys
        message = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        return f"{where}: {message}" if where else message
    if err["type"] in ("tuple_type", "list_type", "dict_type"):
        # A lone word where a list or a table is meant: show the JSON the command line takes.
        shape, example = (
            ("a table", {"key": err["input"]})
            if err["type"] == "dict_type"
            else ("a list", [err["input"]])
        )
        return (
            f"{where}: takes {shape}, got {err['input']!r}; on the command line write it as "
            f"JSON, for example {where}='{json.dumps(example, default=str)}'"
        )
    if err["type"] == "extra_forbidden":
        return f"{where}: there is no such setting{_unknown_key_hint(err['loc'], err['input'])}"
    return f"{where or '(top)'}: {err['msg']}"


def _unknown_key_hint(loc: tuple[Any, ...], value: Any) -> str:
    """A close setting's name; at the top, where an env argument is a common slip
    (`agenthub eval` takes them bare), the `env_kwargs.` form too."""
    import difflib

    section: Any = TrainConfig
    for part in loc[:-1]:
        field = section.model_fields.get(part)
        kinds = (field.annotation, *get_args(field.annotation)) if field else ()
        models = [t for t in kinds if isinstance(t, type) and issubclass(t, ConfigSection)]
        if not models:
            return ""
        section = models[0]
    key, prefix = str(loc[-1]), "".join(f"{part}." for part in loc[:-1])
    close = [prefix + c for c in difflib.get_close_matches(key, section.model_fields, 1, 0.7)]
    if len(loc) > 1:
        return f" (did you mean {close[0]}?)" if close else f" in {loc[-2]}"
    if isinstance(value, dict):  # a section's name mistyped
        return f" (did you mean {close[0]}?)" if close else ""
    # A section's setting given without its section: `seed=1` for `run.seed=1`.
    nested = {
        f"{name}.{leaf}": leaf
        for name, field in TrainConfig.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, ConfigSection)
        for leaf in field.annotation.model_fields
    }
    near = set(difflib.get_close_matches(key, set(nested.values()), 3, 0.8))
    close += [path for path, leaf in nested.items() if leaf in near][:3]
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    env_argument = f"env_kwargs.{key}={shown}"
    if close:
        return f" (did you mean {' or '.join(close)}, or the env's argument, {env_argument}?)"
    return f"; an argument of the env goes under env_kwargs: {env_argument}"


def _set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {key}: {part} is a value, not a section")
        node = child
    node[parts[-1]] = value


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value`, read as every agenthub command reads KEY=VALUE arguments."""
    try:
        return parse_pair(item)
    except AgentHubError:
        raise ConfigError(
            f"override {item!r} is not KEY=VALUE (for example learner.lr=3e-4)"
        ) from None


def load_config(
    files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    base: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """Resolve `base`, then each TOML file in order, then `key=value` overrides."""
    tree: dict[str, Any] = dict(base or {})
    for file in files:
        path = Path(file)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        tree = _merge(tree, data)
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(tree, key, value)
    try:
        return TrainConfig.model_validate(tree)
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise ConfigError(
            f"invalid training config: {problems}. `agenthub train --env ID --print-config` "
            "shows every field with its value"
        ) from None
