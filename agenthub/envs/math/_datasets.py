"""Math tasks from JSONL files: GSM8K (`question`/`answer` with `####`), MATH
(`problem`/`solution` with `\\boxed{}`), or plain `prompt`/`label` lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from agenthub._types import Task
from agenthub.envs.math._extract import gold_from_gsm8k, gold_from_math
from agenthub.envs.math._generator import INSTRUCTION


def read_math_jsonl(path: str | Path, *, instruction: str = INSTRUCTION) -> Iterator[Task]:
    """One task per line; the format is recognised per line by its fields.

    The gold answer is the number after `####` (GSM8K), the last `\\boxed{}` of the solution
    (MATH) or `label` as given. `instruction` is appended to the question. Other fields are kept
    as metadata, the full solution under `solution`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"math task file {path} does not exist")
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where} is not valid JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{where} must be a JSON object, not {type(record).__name__}")
            try:
                yield _task(record, f"{path.stem}-{n}", instruction)
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(
                    f"{where}: {exc}. Each line needs 'question' and 'answer' (GSM8K, with "
                    "'#### N'), 'problem' and 'solution' (MATH, with \\boxed{}), or 'prompt' "
                    f"and 'label'; this one has {sorted(record)}"
                ) from exc


def _task(record: dict[str, object], default_id: str, instruction: str) -> Task:
    if "question" in record and "answer" in record:
        question, solution = str(record.pop("question")), str(record.pop("answer"))
        gold = gold_from_gsm8k(solution)
    elif "problem" in record and "solution" in record:
        question, solution = str(record.pop("problem")), str(record.pop("solution"))
        gold = gold_from_math(solution)
    elif "prompt" in record and "label" in record:
        question, solution = str(record.pop("prompt")), ""
        gold = str(record.pop("label"))
    else:
        raise KeyError("no known pair of fields")
    task_id = str(record.pop("id", default_id))
    metadata = dict(record)
    if solution:
        metadata["solution"] = solution
    prompt = f"{question.strip()} {instruction}".strip() if instruction else question
    return Task(id=task_id, prompt=prompt, label=gold, metadata=metadata)
