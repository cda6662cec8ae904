"""Tasks from JSONL files, shared by the built-in environments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from agenthub._types import Message, Task


def render_plain(task: Task) -> str:
    """The prompt as text: a text prompt as is, chat messages as `role: content` lines."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "".join(f"{m.role}: {m.content}\n" for m in task.prompt) + "assistant: "


def read_jsonl_tasks(
    path: str | Path, *, input_key: str = "prompt", label_key: str | None = "label"
) -> Iterator[Task]:
    """One `Task` per line: the prompt under `input_key` (text, or a list of chat messages),
    the label under `label_key`, an optional `id`, everything else kept as metadata."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file {path} does not exist")
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where} is not valid JSON: {exc}") from exc
            if not isinstance(record, dict) or input_key not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(
                    f"{where} has no {input_key!r} field (it has {keys}); "
                    "choose the prompt field with input_key=..."
                )
            prompt = record.pop(input_key)
            label = record.pop(label_key, None) if label_key else None
            task_id = str(record.pop("id", f"{path.stem}-{n}"))
            try:
                yield Task(
                    id=task_id,
                    prompt=prompt
                    if isinstance(prompt, str)
                    else tuple(Message.model_validate(m) for m in prompt),
                    label=label,
                    metadata=record,
                )
            except (ValidationError, TypeError) as exc:
                raise ValueError(
                    f"{where}: {input_key!r} must be text or a list of "
                    f"{{'role': ..., 'content': ...}} messages ({exc})"
                ) from exc
