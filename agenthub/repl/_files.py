"""Trajectory files: `:save` appends one JSON line, `:load` reads one back."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from agenthub._errors import AgentHubError
from agenthub.agents import Trajectory

__all__ = ["append_line", "read_line"]


def append_line(file: str, line: str) -> tuple[Path, int]:
    path = Path(file).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as sink:
        sink.write(line + "\n")
    return path, len(path.read_text(encoding="utf-8").splitlines())


def read_line(file: str, line: str | None) -> tuple[Trajectory, int]:
    path = Path(file).expanduser()
    if not path.is_file():
        raise AgentHubError(f":load {path}: no such file")
    lines = [text for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
    if not lines:
        raise AgentHubError(f":load {path}: the file holds no trajectories")
    try:
        number = len(lines) if line is None else int(line)
    except ValueError as exc:
        raise AgentHubError(f":load FILE LINE: LINE must be a number, got {line!r}") from exc
    if not 1 <= number <= len(lines):
        raise AgentHubError(f":load {path} {number}: the file has lines 1..{len(lines)}")
    try:
        return Trajectory.model_validate_json(lines[number - 1]), number
    except ValidationError as exc:
        raise AgentHubError(
            f"{path} line {number} is not a trajectory (agenthub eval's format): {exc}"
        ) from exc
