"""Tasks from JSONL files, shared by the built-in environments."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agenthub._errors import NoTaskSourceError, TaskFileError
from agenthub._transcript import transcript
from agenthub._types import Message, Task
from agenthub.envs._files import read_jsonl_records


def no_dataset_for(env: object, split: str) -> NoTaskSourceError:
    """What a built-in env given `dataset=`/`eval_dataset=` files raises for a split it got no
    file for: falling back to its generated tasks would score them in the file's place."""
    if split == "held_out":
        way = (
            "pass eval_dataset=FILE too (env_kwargs.eval_dataset=FILE in training), or evaluate "
            "its 'train' split (eval --split train; eval.split=train in training)"
        )
    else:
        way = f"pass dataset=FILE for {split!r} too (env_kwargs.dataset=FILE in training)"
    return NoTaskSourceError(
        f"{type(env).__name__} was given a task file for another split but none for "
        f"{split!r}, and with a task file its generated tasks are off for every split (they "
        f"would stand in for your data unnoticed): {way}"
    )


def render_plain(task: Task) -> str:
    """The prompt as text: a text prompt as is, chat messages as `role: content` lines."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "".join(f"{m.role}: {m.content}\n" for m in task.prompt) + "assistant: "


class TaskFiles:
    """An env's `dataset=`/`eval_dataset=` task files, for its `train` and `held_out` splits,
    each checked to exist now, so a wrong path fails when the env is made rather than when
    tasks are first read."""

    def __init__(self, dataset: str | None, eval_dataset: str | None) -> None:
        for argument, path in (("dataset", dataset), ("eval_dataset", eval_dataset)):
            if path is not None and not Path(path).is_file():
                what = "is not a regular file" if Path(path).exists() else "does not exist"
                raise TaskFileError(f"{argument}={path}: the task file {what}")
        self._paths = {"train": dataset, "held_out": eval_dataset}

    def of(self, split: str, env: object) -> str | None:
        """The file of `split`; None when `env` was given no file at all (its own tasks
        then); `no_dataset_for`'s error when it was given one for another split only."""
        path = self._paths.get(split)
        if path is None and any(self._paths.values()):
            raise no_dataset_for(env, split)
        return path


def scored_texts(prompt: str, action: str) -> tuple[str, str]:
    """`(query, prompt)` as OpenRLHF hands them to reward functions and servers: while a run
    steps the env, the whole decoded sequence and the templated prompt, special tokens kept
    (`agenthub.transcript()`); elsewhere the plain `prompt` followed by the reply, and `prompt`."""
    seen = transcript()
    if seen is None:
        return prompt + action, prompt
    return seen.text(), seen.prompt_text()


def read_jsonl_tasks(
    path: str | Path, *, input_key: str = "prompt", label_key: str | None = "label"
) -> Iterator[Task]:
    """One `Task` per line of a JSONL file (public as `agenthub.read_tasks`): the prompt under
    `input_key` (text, or a list of chat messages), the label under `label_key`, an optional
    `id` (else `<file stem>-<line>`), every other field kept as metadata. Read lazily; a
    missing file or a bad line raises `TaskFileError` naming `FILE:LINE`."""
    for where, default_id, record in read_jsonl_records(path):
        if input_key not in record:
            raise TaskFileError(
                f"{where} has no {input_key!r} field (it has {sorted(record)}). Write one "
                '{"prompt": ..., "label": ...} object per line, or, with an env that takes '
                "them (reward_func, judge, openrlhf_agent), name the prompt's field with the env "
                "argument input_key=FIELD and the label's with label_key=FIELD (in `agenthub "
                "train`, env_kwargs.input_key=FIELD), as OpenRLHF's --input_key does; a "
                "dataset in a built-in env's own format (GSM8K, MATH, MBPP, HumanEval) goes in "
                "its dataset=FILE or eval_dataset=FILE argument instead"
            )
        prompt = record.pop(input_key)
        label = record.pop(label_key, None) if label_key else None
        given_id = record.pop("id", None)
        task_id = default_id if given_id is None else str(given_id)
        try:
            messages = (
                prompt if isinstance(prompt, str) else tuple(map(Message.model_validate, prompt))
            )
            task = Task(id=task_id, prompt=messages, label=label, metadata=record)
        except (ValidationError, TypeError) as exc:
            raise TaskFileError(
                f"{where}: {input_key!r} must be text or a list of "
                f"{{'role': ..., 'content': ...}} messages ({exc})"
            ) from exc
        yield task


def read_task_file(path: str | Path, env_kwargs: Mapping[str, Any]) -> Iterator[Task]:
    """A `--tasks FILE`: one task per line, its prompt and label under the field names the env
    was given (`input_key=`, `label_key=`, as the envs reading OpenRLHF datasets take them),
    else under `prompt` and `label`."""
    return read_jsonl_tasks(
        path,
        input_key=str(env_kwargs.get("input_key", "prompt")),
        label_key=str(env_kwargs.get("label_key", "label")),
    )
