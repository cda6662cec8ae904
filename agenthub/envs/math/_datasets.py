"""Math tasks from JSONL files: GSM8K (`question`/`answer` with `####`), MATH
(`problem`/`solution` with `\\boxed{}`), or plain `prompt`/`label` lines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from agenthub._errors import TaskFileError
from agenthub._types import Task
from agenthub.envs._files import read_jsonl_records
from agenthub.envs.math._extract import gold_from_gsm8k, gold_from_math
from agenthub.envs.math._generator import INSTRUCTION


def read_math_jsonl(path: str | Path, *, instruction: str = INSTRUCTION) -> Iterator[Task]:
    """One task per line; the format is recognised per line by its fields.

    The gold answer is the number after `####` (GSM8K), the last `\\boxed{}` of the solution
    (MATH) or `label` as given. `instruction` is appended to the question. Other fields are kept
    as metadata, the full solution under `solution`.
    """
    for where, default_id, record in read_jsonl_records(path):
        fields = sorted(record)
        try:
            task = _task(record, default_id, instruction)
        except (KeyError, ValueError, TypeError) as exc:
            raise TaskFileError(
                f"{where}: {exc}. Each line needs 'question' and 'answer' (GSM8K, with "
                "'#### N'), 'problem' and 'solution' (MATH, with \\boxed{}), or 'prompt' "
                f"and 'label'; this one has {fields}"
            ) from exc
        yield task


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
