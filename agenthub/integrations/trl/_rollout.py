"""A multi-turn agenthub env as TRL's `GRPOTrainer` takes it: a `rollout_func` that plays
whole episodes (the model's replies, the env's answers, as many turns as the env goes on)
with agenthub's own episode runner, sampling from the model TRL is training."""

from __future__ import annotations

import importlib
import itertools
import threading
from collections.abc import Sequence
from typing import Any

import anyio

from agenthub._registry import make
from agenthub._returns import READ_AHEAD, checked_tasks
from agenthub._types import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    Generation,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Trajectory,
)

__all__ = ["EnvRollout", "env_reward"]


class EnvRollout:
    """`GRPOTrainer(rollout_func=EnvRollout("guess_number"), reward_funcs=[env_reward],
    train_dataset=rollout.train_dataset())`: every row of TRL's batch is one episode of the
    env on that row's task, its replies sampled from the model in training (transformers'
    `generate`, one at a time). TRL gets the episode's tokens after its prompt as the
    completion, with `env_mask` 0 on what the env said (no loss there) and the episode's
    reward as `env_reward`, which `env_reward` hands back as the reward.

    `max_turns` bounds the replies per episode and `max_reply_tokens` each reply (default:
    TRL's `max_completion_length`); the episode's whole completion, replies and env answers,
    is cut at `max_completion_length` tokens."""

    def __init__(
        self,
        env_id: str,
        *,
        max_turns: int | None = None,
        max_reply_tokens: int | None = None,
        seed: int = 0,
        **env_kwargs: Any,
    ) -> None:
        self.env_id = env_id
        self.max_reply_tokens = max_reply_tokens
        self.env_kwargs = env_kwargs
        self.max_turns = max_turns
        self.seed = seed
        self._tasks: dict[str, Task] = {}

    def train_dataset(self, *, split: str = "train", num_examples: int | None = None) -> Any:
        """The env's tasks of `split` as a `datasets.Dataset` with a `prompt` column (the
        task's chat messages, led by the env's system prompt)."""
        dataset_class = importlib.import_module("datasets").Dataset  # a dependency of TRL
        env = make(self.env_id, **self.env_kwargs)
        limit = min(num_examples or READ_AHEAD, READ_AHEAD)
        rows = []
        for task in itertools.islice(checked_tasks(env.tasks(split)), limit):
            prompt = [m.model_dump() for m in task.messages(env.system_prompt)]
            self._tasks[_key(prompt)] = task
            rows.append({"prompt": prompt})
        return dataset_class.from_list(rows)

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        tasks = [self._task(p) for p in prompts]
        args = trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        config = RolloutConfig(
            sampling=SamplingParams(
                max_tokens=self.max_reply_tokens or args.max_completion_length,
                temperature=args.temperature,
            ),
            max_turns=self.max_turns,
            concurrency=len(tasks) or 1,
            seed=self.seed + trainer.state.global_step,
        )
        chat = ChatTokenizer(trainer.processing_class)
        engine = TransformersEngine(model, max_model_len=_context(model))
        runner = EpisodeRunner(engine, chat, self.env_id, config, env_kwargs=self.env_kwargs)

        async def play() -> list[Trajectory]:
            async with anyio.create_task_group() as group:
                done: list[Trajectory | None] = [None] * len(tasks)

                async def one(i: int) -> None:
                    done[i] = await runner.run_episode(tasks[i], sample=i)

                for i in range(len(tasks)):
                    group.start_soon(one, i)
            return [t for t in done if t is not None]

        return _output(anyio.run(play), args.max_completion_length)

    def _task(self, prompt: Any) -> Task:
        task = self._tasks.get(_key(prompt))
        if task is None:
            raise ValueError(
                f"EnvRollout({self.env_id!r}) got a prompt that is not one of its env's tasks: "
                "build the train_dataset with this EnvRollout's train_dataset()"
            )
        return task


def env_reward(
    completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any
) -> list[float]:
    """The reward function beside `EnvRollout`: each episode's reward, as the env gave it.
    TRL logs it under `rewards/env_reward`."""
    return [float(r) for r in env_reward]


class TransformersEngine(InferenceEngine):
    """The trainer's own model sampled with transformers' `generate`, one request at a time
    in a worker thread; logprobs under the tempered distribution it sampled from."""

    def __init__(self, model: Any, *, max_model_len: int) -> None:
        self._model = model
        self._max_model_len = max_model_len
        self._lock = threading.Lock()

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        return await anyio.to_thread.run_sync(self._generate, list(prompt_ids), sampling)

    def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        import torch

        sample = sampling.temperature > 0
        options: dict[str, Any] = {"do_sample": sample, "top_p": sampling.top_p}
        if sample:
            options["temperature"] = sampling.temperature
            options["top_k"] = sampling.top_k if sampling.top_k > 0 else 0
        with self._lock, torch.no_grad():
            out = self._model.generate(
                torch.tensor([prompt_ids], device=self._model.device),
                max_new_tokens=sampling.max_tokens,
                eos_token_id=list(sampling.stop_token_ids) or None,
                pad_token_id=(list(sampling.stop_token_ids) or [0])[0],
                return_dict_in_generate=True,
                output_logits=True,
                **options,
            )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logits = torch.stack(out.logits)[:, 0, :].float() / (sampling.temperature or 1.0)
        chosen = torch.log_softmax(logits, dim=-1)[torch.arange(len(ids)), torch.tensor(ids)]
        stopped = bool(ids) and ids[-1] in sampling.stop_token_ids
        return Generation(
            token_ids=tuple(ids),
            logprobs=tuple(chosen.tolist()),
            finish_reason="stop" if stopped else "length",
            policy_version=self.policy_version,
        )


def _output(trajectories: list[Trajectory], limit: int) -> dict[str, list[Any]]:
    """TRL's rollout dict: the prompt's tokens, the rest as the completion (cut at `limit`
    tokens), `env_mask` 1 on sampled tokens, and the episode's reward."""
    out: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "env_reward": [],
    }
    for t in trajectories:
        start = t.loss_mask.index(1) if 1 in t.loss_mask else len(t.tokens)
        end = start + limit
        out["prompt_ids"].append(t.tokens[:start])
        out["completion_ids"].append(t.tokens[start:end])
        out["logprobs"].append(t.logprobs[start:end])
        out["env_mask"].append(t.loss_mask[start:end])
        out["env_reward"].append(t.reward)
    return out


def _key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\x00".join(f"{m['role']}\x01{m.get('content') or ''}" for m in prompt)


def _context(model: Any) -> int:
    config = model.config
    return int(getattr(config, "max_position_embeddings", None) or 2048)
