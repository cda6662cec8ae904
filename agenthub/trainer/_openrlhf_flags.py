"""An OpenRLHF `train_ppo_ray` command line as an agenthub training config.

`translate` reads the flags in either of OpenRLHF's spellings (the older `--init_kl_coef`,
the current dotted `--algo.kl.init_coef`) and returns the `TrainConfig` settings that mean
the same, plus every flag that has no equivalent, each with its reason. Where OpenRLHF's
default differs from agenthub's in a way that changes the algorithm (the KL penalty in the
reward, PPO-clip's epsilon, synchronous training, no off-policy correction, no filtering, no
chat template, the reward clip at +-10), OpenRLHF's is written out, so the config means what
the command meant.
"""

from __future__ import annotations

import fnmatch
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenthub.trainer._openrlhf_flag_table import NO_EQUIVALENT, OLD_NAMES

__all__ = ["Translation", "Unmapped", "split_command", "translate"]

GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


@dataclass(frozen=True)
class Unmapped:
    """A flag of the command with no agenthub equivalent."""

    flag: str
    """As written on the command line, `--` and values included."""
    reason: str
    """One line: why it has no equivalent, or what to use instead."""

    @property
    def not_yet_supported(self) -> bool:
        return self.reason.startswith("not yet supported")


@dataclass(frozen=True)
class Translation:
    """The `TrainConfig` settings an OpenRLHF command means, and what did not translate."""

    settings: dict[str, Any]
    """Nested like `TrainConfig`'s fields (`{"learner": {"kl_coef": 0.01}}`)."""
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the person should know: defaults written out, approximations, what to add."""

    def toml(self) -> str:
        """The settings as a sparse TOML config for `agenthub train --config`."""
        lines = [
            "# An agenthub training config translated from an OpenRLHF train_ppo_ray command",
            "# by `agenthub config from-openrlhf`.",
        ]
        for note in self.notes:
            lines.append(f"# note: {note}")
        for item in self.unmapped:
            lines.append(f"# not translated: {item.flag}: {item.reason}")
        lines += _toml_table(self.settings, ())
        return "\n".join(lines) + "\n"


def _toml_table(table: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    lines = []
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    if scalars:
        if path:
            lines += ["", f"[{'.'.join(path)}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in scalars.items()]
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines += _toml_table(value, (*path, key))
    return lines


def _toml_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


def split_command(text: str) -> list[str]:
    """The `train_ppo_ray` flags of a command as written in a shell script: comments, line
    continuations and anything up to `openrlhf.cli.train_ppo_ray` (or a lone `--`) dropped."""
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    for i, token in enumerate(tokens):
        if token.endswith("openrlhf.cli.train_ppo_ray") or token.endswith("train_ppo_ray.py"):
            return tokens[i + 1 :]
    if tokens[:1] == ["--"]:
        return tokens[1:]
    return tokens


def _parse_flags(argv: Sequence[str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each flag's values by its current name, and how each was written."""
    values: dict[str, list[str]] = {}
    written: dict[str, str] = {}
    current: str | None = None
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token[2:].partition("=")
            name = name.replace("-", "_") if "." not in name else name
            current = OLD_NAMES.get(name, name)
            values[current] = [value] if eq else []
            written[current] = token
        elif current is None:
            raise ValueError(
                f"{token!r} comes before any flag: give the train_ppo_ray command's flags "
                "(--advantage_estimator group_norm ...)"
            )
        else:
            values[current].append(token)
            written[current] += f" {shlex.quote(token)}"
    return values, written


class _Reader:
    """The parsed flags, read once each: what is left over is reported as unmapped."""

    def __init__(self, values: dict[str, list[str]]) -> None:
        self.values = values
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.values

    def flag(self, name: str) -> bool:
        self.used.add(name)
        if name not in self.values:
            return False
        given = self.values[name]
        return not given or given[0].lower() not in ("false", "0", "no")

    def text(self, name: str) -> str | None:
        self.used.add(name)
        given = self.values.get(name)
        if not given:
            return None
        return None if given[0] == "None" else given[0]

    def number(self, name: str) -> float | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"--{name} takes a number, got {raw!r}") from None

    def integer(self, name: str) -> int | None:
        number = self.number(name)
        return None if number is None else int(number)

    def numbers(self, name: str) -> list[float] | None:
        self.used.add(name)
        given = self.values.get(name)
        if not given:
            return None
        try:
            return [float(v) for v in given]
        except ValueError:
            raise ValueError(f"--{name} takes numbers, got {' '.join(given)!r}") from None


def translate(argv: Sequence[str]) -> Translation:
    """Translate `train_ppo_ray` flags (see `split_command` for a command as text).

    Raises ValueError for a command OpenRLHF itself refuses (a group estimator with one sample
    per prompt) or a flag value that does not parse.
    """
    values, written = _parse_flags(argv)
    read = _Reader(values)
    out = Translation(settings={})
    _environment(read, out)
    _algorithm(read, out)
    _kl_and_clip(read, out)
    _rollout(read, out)
    _reward(read, out)
    _learner(read, out)
    _run_and_eval(read, out)
    for name in values:
        if name in read.used:
            continue
        reason = next(
            (why for pattern, why in NO_EQUIVALENT.items() if fnmatch.fnmatchcase(name, pattern)),
            "not a train_ppo_ray flag this translator knows: check it by hand",
        )
        out.unmapped.append(Unmapped(flag=written[name], reason=reason))
    return out


def _set(out: Translation, key: str, value: Any) -> None:
    *sections, leaf = key.split(".")
    node = out.settings
    for section in sections:
        node = node.setdefault(section, {})
    node[leaf] = value


def _environment(read: _Reader, out: Translation) -> None:
    agent = read.text("train.agent_func_path")
    remote = read.text("reward.remote_url")
    if agent is not None:
        _set(out, "env", "openrlhf_agent")
        _set(out, "env_kwargs.agent_func", agent)
    elif remote is not None:
        _set(out, "env", "reward_func")
        _set(out, "env_kwargs.remote_rm_url", remote)
    else:
        out.notes.append(
            "no --remote_rm_url or --agent_func_path: give the env at train time "
            "(agenthub train --config FILE --env ID)"
        )
    dataset = read.text("data.prompt_dataset")
    if dataset is not None:
        _set(out, "env_kwargs.dataset", dataset)
        out.notes.append(
            f"env_kwargs.dataset = {dataset!r} must be a local JSONL file: agenthub does not "
            "download datasets"
        )
    for flag, key in (
        ("eval.dataset", "eval_dataset"),
        ("data.input_key", "input_key"),
        ("data.label_key", "label_key"),
    ):
        given = read.text(flag)
        if given is not None:
            _set(out, f"env_kwargs.{key}", given)
    model = read.text("actor.model_name_or_path")
    if model is not None:
        _set(out, "model", model)
        out.notes.append(f"model = {model!r} must be a local Hugging Face model directory")


def _algorithm(read: _Reader, out: Translation) -> None:
    estimator = read.text("algo.advantage.estimator") or "gae"  # OpenRLHF's default: PPO
    if estimator not in ("gae", "reinforce", *GROUP_ESTIMATORS):
        raise ValueError(
            f"--advantage_estimator {estimator} is not one of OpenRLHF's estimators (gae, "
            f"reinforce, {', '.join(GROUP_ESTIMATORS)})"
        )
    _set(out, "algorithm.estimator", estimator)
    samples = read.integer("rollout.n_samples_per_prompt")
    if samples is not None:
        _set(out, "rollout.n_samples_per_prompt", samples)
    elif estimator not in GROUP_ESTIMATORS:
        _set(out, "rollout.n_samples_per_prompt", 1)  # OpenRLHF's default
    if estimator in GROUP_ESTIMATORS and (samples or 1) < 2:
        if samples is not None:
            raise ValueError(
                f"--advantage_estimator {estimator} needs --n_samples_per_prompt of 2 or more "
                f"(OpenRLHF refuses {samples} too: every advantage would be 0)"
            )
        out.notes.append(
            f"{estimator} compares the samples of a prompt, and the command sets no "
            "--n_samples_per_prompt (OpenRLHF's default, 1, is refused by OpenRLHF too): "
            "agenthub's rollout.n_samples_per_prompt default is kept"
        )
    if read.flag("algo.advantage.no_std_norm"):
        _set(out, "algorithm.advantage_std_norm", False)
    filtering = read.flag("algo.dynamic_filtering_enable")
    _set(out, "algorithm.filter_groups", filtering)
    bounds = read.numbers("algo.dynamic_filtering_range")
    if filtering:
        low, high = bounds if bounds and len(bounds) == 2 else (0.0, 1.0)
        _set(out, "algorithm.filter_low", low)
        _set(out, "algorithm.filter_high", high)
    if read.flag("train.async_enable"):
        queue = read.integer("train.async_queue_size") or 1
        _set(out, "algorithm.max_staleness", queue)
    else:
        read.used.add("train.async_queue_size")
        _set(out, "algorithm.max_staleness", 0)  # OpenRLHF's default is synchronous


def _kl_and_clip(read: _Reader, out: Translation) -> None:
    coef = read.number("algo.kl.init_coef")
    coef = 0.01 if coef is None else coef  # OpenRLHF's default
    _set(out, "learner.kl_coef", max(coef, 0.0))
    target = read.number("algo.kl.target")  # OpenRLHF's adaptive controller, when given
    if target is not None:
        _set(out, "learner.kl_target", target)
        horizon = read.number("algo.kl.horizon")
        _set(out, "learner.kl_horizon", int(10000 if horizon is None else horizon))
    else:
        read.used.add("algo.kl.horizon")  # a horizon alone changes nothing there either
    as_loss = read.flag("algo.kl.use_loss")
    _set(out, "learner.kl_mode", "loss" if as_loss else "reward")
    _set(out, "learner.kl_estimator", read.text("algo.kl.estimator") or "k1")
    if coef > 0 and not as_loss:
        out.notes.append(
            "the KL is a reward penalty (no --use_kl_loss): OpenRLHF sums it into each token's "
            "return, agenthub subtracts each token's own KL from its advantage"
        )
    eps = read.number("actor.eps_clip")
    low = high = 0.2 if eps is None else eps  # OpenRLHF's default is symmetric
    pair = read.numbers("actor.eps_clip_low_high")
    if pair is not None and len(pair) == 2:
        low, high = pair
    _set(out, "learner.eps_low", low)
    _set(out, "learner.eps_high", high)
    if read.flag("algo.advantage.is_correction_enable"):
        _set(
            out, "learner.importance_mode", read.text("algo.advantage.is_correction_type") or "tis"
        )
        bounds = read.numbers("algo.advantage.is_correction_threshold")
        if bounds is not None and len(bounds) == 2:
            _set(out, "learner.importance_low", bounds[0])
            _set(out, "learner.importance_high", bounds[1])
    else:
        read.used.update(
            {"algo.advantage.is_correction_type", "algo.advantage.is_correction_threshold"}
        )
        _set(out, "learner.importance_mode", "none")  # OpenRLHF's default


def _rollout(read: _Reader, out: Translation) -> None:
    for flag, key in (("rollout.temperature", "temperature"), ("rollout.top_p", "top_p")):
        given = read.number(flag)
        if given is not None:
            _set(out, f"rollout.{key}", given)
    reply = read.integer("rollout.max_new_tokens")
    if reply is not None:
        _set(out, "rollout.max_reply_tokens", reply)
    longest = read.integer("data.max_len")
    if longest is not None:
        _set(out, "rollout.max_tokens", longest)
    _set(out, "rollout.chat_template", read.flag("data.apply_chat_template"))
    split = read.integer("vllm.tensor_parallel_size")
    if split is not None:
        _set(out, "rollout.tensor_parallel_size", split)  # GPUs each engine is split over


def _reward(read: _Reader, out: Translation) -> None:
    clip = read.numbers("reward.clip_range")
    if clip is not None and (len(clip) != 2 or not clip[0] < clip[1]):
        raise ValueError(
            f"--reward_clip_range takes two numbers, low then high, got {clip} (OpenRLHF "
            "refuses it too)"
        )
    _set(out, "reward.clip_range", clip or [-10.0, 10.0])  # OpenRLHF's default
    if read.has("reward.overlong_buffer_len"):
        _overlong(read, out)
    coef = read.number("reward.stop_properly_penalty_coef")
    if coef is not None:
        if coef > 1:
            raise ValueError(
                f"--stop_properly_penalty_coef {coef:g} must be in [0, 1] or negative (OpenRLHF "
                "refuses it too)"
            )
        _set(out, "reward.stop_properly_penalty_coef", coef)


def _overlong(read: _Reader, out: Translation) -> None:
    buffer = read.number("reward.overlong_buffer_len")
    if buffer is None:
        return
    if buffer < 1 or buffer != int(buffer):
        raise ValueError(f"--overlong_buffer_len takes a whole number of tokens, got {buffer:g}")
    _set(out, "reward.overlong_buffer_len", int(buffer))
    factor = read.number("reward.overlong_penalty_factor")
    if factor is not None:
        _set(out, "reward.overlong_penalty_factor", factor)
    rollout = out.settings.setdefault("rollout", {})
    if "max_reply_tokens" not in rollout:
        # Without --max_new_tokens OpenRLHF ends the buffer at --max_len (2048 by default).
        rollout["max_reply_tokens"] = rollout.get("max_tokens", 2048)
        out.notes.append(
            "no --max_new_tokens: OpenRLHF ends the overlong buffer at --max_len, so "
            f"rollout.max_reply_tokens = {rollout['max_reply_tokens']} is written out"
        )
    if buffer > rollout["max_reply_tokens"]:
        raise ValueError(
            f"--overlong_buffer_len {buffer:g} is longer than a reply may be "
            f"({rollout['max_reply_tokens']} tokens; OpenRLHF refuses it too)"
        )


def _learner(read: _Reader, out: Translation) -> None:
    for flag, key in (
        ("actor.adam.lr", "learner.lr"),
        ("actor.adam.weight_decay", "learner.weight_decay"),
        ("actor.max_norm", "learner.grad_clip"),
    ):
        given = read.number(flag)
        if given is not None:
            _set(out, key, given)
    for flag, key in (
        ("train.micro_batch_size", "learner.micro_batch_size"),
        ("train.max_epochs", "learner.epochs"),
        ("ds.zero_stage", "learner.zero_stage"),
    ):
        given_int = read.integer(flag)
        if given_int is not None:
            _set(out, key, given_int)
    batch = read.integer("train.batch_size")
    if batch is not None:
        samples = out.settings.get("rollout", {}).get("n_samples_per_prompt", 8)
        _set(out, "algorithm.batch_groups", max(1, batch // samples))
    if read.flag("bf16") or read.text("ds.param_dtype") == "bf16":
        _set(out, "learner.bf16", True)
    if out.settings["algorithm"]["estimator"] == "gae":
        _critic(read, out)


def _critic(read: _Reader, out: Translation) -> None:
    lr = read.number("critic.adam.lr")
    _set(out, "learner.critic.lr", 9e-6 if lr is None else lr)  # OpenRLHF's default
    gamma, lam = read.number("algo.advantage.gamma"), read.number("algo.advantage.lambd")
    _set(out, "learner.critic.gamma", 1.0 if gamma is None else gamma)
    _set(out, "learner.critic.lam", 1.0 if lam is None else lam)
    clip = read.number("critic.value_clip")
    _set(out, "learner.critic.value_clip", 0.5 if clip is None else clip)


def _run_and_eval(read: _Reader, out: Translation) -> None:
    seed = read.integer("train.seed")
    _set(out, "run.seed", 42 if seed is None else seed)  # OpenRLHF's default
    every = read.integer("ckpt.save_steps")
    if every is not None and every > 0:
        _set(out, "run.checkpoint_every", every)
    keep = read.integer("ckpt.max_num")
    if keep is not None:
        _set(out, "run.keep_checkpoints", keep)
    if read.flag("ckpt.save_hf"):
        _set(out, "run.save_model", True)
    steps = read.integer("eval.steps")
    if steps is not None and steps > 0:
        _set(out, "eval.every", steps)
    temperature = read.number("eval.temperature")
    if temperature is not None:
        _set(out, "eval.temperature", temperature)
    samples = read.integer("eval.n_samples_per_prompt")
    if samples is not None:
        _set(out, "eval.samples_per_task", samples)
