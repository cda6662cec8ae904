"""`agenthub.read_tasks`: the JSONL task reader plugin envs share with the built-in ones."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import agenthub
from agenthub import Message, Task, TaskFileError
from agenthub.testing import check_env

from ._envs import CountdownEnv


class FileCountdownEnv(CountdownEnv):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def tasks(self, split: str = "train") -> Iterator[Task]:
        return agenthub.read_tasks(self.path)


def write(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_plugin_env_reads_its_tasks_from_a_jsonl_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / "count.jsonl",
        {"prompt": "Count down from 2.", "label": 2, "level": "easy"},
        {"id": "chat", "prompt": [{"role": "user", "content": "Count down from 3."}], "label": 3},
    )
    first, second = FileCountdownEnv(str(path)).tasks()
    assert first == Task(
        id="count-1", prompt="Count down from 2.", label=2, metadata={"level": "easy"}
    )
    assert second.id == "chat" and second.prompt == (
        Message(role="user", content="Count down from 3."),
    )
    check_env(FileCountdownEnv(str(path)))


def test_a_bad_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", {"prompt": "ok", "label": 1}, {"question": "no prompt"})
    tasks = agenthub.read_tasks(path)
    assert next(tasks).id == "bad-1"
    with pytest.raises(TaskFileError, match=r"bad\.jsonl:2 has no 'prompt' field"):
        next(tasks)
    with pytest.raises(TaskFileError, match=r"task file .*missing\.jsonl does not exist"):
        list(agenthub.read_tasks(tmp_path / "missing.jsonl"))


def test_a_null_id_and_a_byte_order_mark_are_read_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "id": null}\n')
    [task] = agenthub.read_tasks(path)
    assert task == Task(id="bom-1", prompt="a")
