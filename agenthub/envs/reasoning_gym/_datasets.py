"""reasoning-gym's procedural datasets as agenthub tasks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agenthub._types import Task
from agenthub.envs._foreign import import_foreign

HELD_OUT_SEED_OFFSET = 1_000_003
"""reasoning-gym has no splits: `held_out` is the same generator seeded `seed + 1_000_003`,
`train` seeded `seed`. Procedural rows of two seeds rarely coincide, but may."""

DatasetWeights = Mapping[str, float] | Sequence[Mapping[str, Any]]


def reasoning_gym() -> Any:
    return import_foreign("reasoning_gym", env="reasoning_gym", extra="reasoning-gym")


def split_seed(seed: int, split: str) -> int:
    if split == "train":
        return seed
    if split == "held_out":
        return seed + HELD_OUT_SEED_OFFSET
    raise ValueError(f"reasoning_gym has the splits 'train' and 'held_out', not {split!r}")


def build_dataset(
    name: str, *, size: int, seed: int, datasets: DatasetWeights | None, config: Mapping[str, Any]
) -> Any:
    """`reasoning_gym.create_dataset(name, size=, seed=, **config)`; for `composite`, its
    sub-datasets from `datasets`: `{NAME: WEIGHT}` or `[{"name", "weight", "config"}]`."""
    rg = reasoning_gym()
    if name == "composite":
        if not datasets:
            raise ValueError(
                "dataset=composite needs datasets=: a JSON object of NAME: WEIGHT, e.g. "
                'datasets=\'{"basic_arithmetic": 1, "leg_counting": 2}\''
            )
        specs = [rg.composite.DatasetSpec(**spec) for spec in _specs(datasets)]
        return rg.create_dataset(name, size=size, seed=seed, datasets=specs, **config)
    if datasets:
        raise ValueError(f"datasets= is for dataset=composite, not dataset={name!r}")
    if name not in rg.factory.DATASETS:
        known = ", ".join(sorted(rg.factory.DATASETS))
        raise ValueError(f"reasoning-gym has no dataset {name!r}; it has: {known}")
    return rg.create_dataset(name, size=size, seed=seed, **config)


def _specs(datasets: DatasetWeights) -> Iterator[dict[str, Any]]:
    if isinstance(datasets, Mapping):
        for name, weight in datasets.items():
            yield {"name": name, "weight": float(weight), "config": {}}
        return
    for spec in datasets:
        yield {
            "name": spec["name"],
            "weight": float(spec.get("weight", 1.0)),
            "config": dict(spec.get("config", {})),
        }


def entry_task(name: str, split: str, index: int, entry: Mapping[str, Any]) -> Task:
    """One dataset row as a task: the question as prompt, the answer as label (what
    `check_env` and people read), where it came from in metadata so the env can regenerate
    the row, metadata and all, to score it."""
    metadata = entry.get("metadata") or {}
    source = metadata.get("source_dataset", name)
    return Task(
        id=f"{name}/{split}/{index}",
        prompt=str(entry["question"]),
        label=None if entry.get("answer") is None else str(entry["answer"]),
        metadata={"dataset": name, "source_dataset": str(source), "split": split, "index": index},
    )
