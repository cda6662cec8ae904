from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import ForeignEnvError, call_foreign
from agenthub.envs.reasoning_gym._datasets import (
    DatasetWeights,
    build_dataset,
    entry_task,
    reasoning_gym,
    split_seed,
)


class ReasoningGymEnv(Env[list[Message]]):
    """A reasoning-gym procedural dataset; needs the extra `reasoning-gym`.

    `dataset` names one of reasoning-gym's datasets (`basic_arithmetic`, `leg_counting`, ...;
    `composite` mixes several: `datasets={"NAME": WEIGHT, ...}`, or a list of
    `{"name", "weight", "config"}`); further KEY=VALUE arguments are the dataset's own config
    (`min_terms=2`). Each split has `size` rows: `train` generated with `seed`, `held_out` with
    `seed + 1_000_003` (reasoning-gym has no splits of its own).

    Single-turn. The reply's answer is the last `<answer>...</answer>` (as reasoning-gym's
    `extract_answer` reads it; the system prompt asks for it), else the whole reply stripped.
    The dataset's own `score_answer` gives the reward (partial credit where the dataset gives
    it); `score` is 1.0 only for a fully right answer, and `extra_logs` has `score_answer`.
    """

    def __init__(
        self,
        *,
        dataset: str,
        size: int = 500,
        seed: int = 0,
        datasets: DatasetWeights | None = None,
        system_prompt: str | None = None,
        **config: Any,
    ) -> None:
        rg = reasoning_gym()
        self._name = dataset
        self._size = size
        self._seed = seed
        self._weights = datasets
        self._config = config
        # Built now so a wrong name or config fails when the env is made, not mid-run.
        self._datasets = {"train": self._build("train")}
        self.system_prompt = (
            system_prompt if system_prompt is not None else rg.utils.SYSTEM_PROMPTS["default"]
        )
        self._entry: Mapping[str, Any] | None = None
        self._scorer: Any = None

    def _build(self, split: str) -> Any:
        seed = split_seed(self._seed, split)
        return build_dataset(
            self._name, size=self._size, seed=seed, datasets=self._weights, config=self._config
        )

    def _dataset(self, split: str) -> Any:
        if split not in self._datasets:
            self._datasets[split] = self._build(split)
        return self._datasets[split]

    def tasks(self, split: str = "train") -> Iterator[Task]:
        dataset = self._dataset(split)
        for index in range(self._size):
            yield entry_task(self._name, split, index, dataset[index])

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        self._entry = None
        self._entry, self._scorer = await call_foreign(
            "reasoning-gym", f"generating the row of task {task.id}", lambda: self._row(task)
        )
        return [], {}

    def _row(self, task: Task) -> tuple[Mapping[str, Any], Any]:
        """The dataset row `task` was made from, regenerated with its metadata, and the
        dataset that scores it; a task from elsewhere is scored against its label."""
        meta = task.metadata
        if meta.get("dataset") == self._name and isinstance(meta.get("index"), int):
            dataset = self._dataset(str(meta["split"]))
            entry = dataset[meta["index"]]
            if entry["question"] != task.prompt:
                raise ForeignEnvError(
                    f"task {task.id} is not row {meta['index']} of this env's {self._name} "
                    f"dataset (seed={self._seed}, size={self._size}, config "
                    f"{json.dumps(self._config)}): make the env with the arguments its tasks "
                    "were made with"
                )
            return entry, dataset
        entry = {"question": task.prompt, "answer": task.label, "metadata": {}}
        return entry, self._datasets["train"]

    async def step(self, action: str) -> Step[list[Message]]:
        entry, scorer = self._entry, self._scorer
        if entry is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self._entry = None
        answer = reasoning_gym().utils.extract_answer(action)
        answer = action.strip() if answer is None else answer
        value = await call_foreign(
            "reasoning-gym", "scoring the answer", lambda: scorer.score_answer(answer, entry)
        )
        value = float(value)
        return Step(
            [],
            value,
            terminated=True,
            score=1.0 if value >= 1.0 else 0.0,
            extra_logs={"score_answer": value},
        )

    async def aclose(self) -> None:
        self._entry = None
