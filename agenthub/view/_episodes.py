"""What the episode pages ask of a run: a page of the table, one episode token by token, the
curves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from pydantic import ValidationError

from agenthub.agents import Trajectory
from agenthub.view._runs import EpisodeRow, Run
from agenthub.view._tokens import TokenizerLookup, pieces, segments, token_kinds

__all__ = ["EpisodeQuery", "QueryError", "curves", "episode_detail", "episode_page", "tasks"]

SORTABLE = tuple(f.name for f in fields(EpisodeRow))
MAX_PAGE = 500


class QueryError(ValueError):
    """A table query the view cannot answer; its message says which parameter and why."""


@dataclass(frozen=True)
class EpisodeQuery:
    """A page of the episode table: filtered, sorted, then cut at `offset`/`limit`."""

    offset: int = 0
    limit: int = 50
    sort: str = "index"
    descending: bool = False
    task: str = ""
    error: str = ""  # "" any, "none" without error, "any" with one, else that cause
    min_reward: float | None = None
    max_reward: float | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> EpisodeQuery:
        try:
            query = cls(
                offset=int(params.get("offset", 0)),
                limit=int(params.get("limit", 50)),
                sort=params.get("sort", "index"),
                descending=params.get("desc", "0") in ("1", "true"),
                task=params.get("task", ""),
                error=params.get("error", ""),
                min_reward=_number(params.get("min_reward")),
                max_reward=_number(params.get("max_reward")),
            )
        except ValueError as exc:
            raise QueryError(f"a table parameter is not a number ({exc})") from None
        if query.sort not in SORTABLE:
            raise QueryError(f"sort={query.sort!r}: sort by one of {', '.join(SORTABLE)}")
        if query.offset < 0 or not 0 < query.limit <= MAX_PAGE:
            raise QueryError(f"offset must be 0 or more and limit 1 to {MAX_PAGE}")
        return query

    def unfiltered(self) -> bool:
        return not (self.task or self.error) and self.min_reward is self.max_reward is None

    def keeps(self, row: EpisodeRow) -> bool:
        if self.task and self.task.lower() not in row.task_id.lower():
            return False
        if self.error == "none" and row.error is not None:
            return False
        if self.error == "any" and row.error is None:
            return False
        if self.error not in ("", "none", "any") and row.error != self.error:
            return False
        if self.min_reward is not None and row.reward < self.min_reward:
            return False
        return self.max_reward is None or row.reward <= self.max_reward


def _number(text: str | None) -> float | None:
    return None if text is None or text == "" else float(text)


def episode_page(run: Run, query: EpisodeQuery) -> dict[str, Any]:
    """The rows of one page. The first page of a file still being indexed comes as soon as its
    lines are read; sorting and filtering work on what is indexed so far (`complete` says)."""
    run.refresh()
    if query.unfiltered() and query.sort == "index" and not query.descending:
        run.episodes.wait_for(query.offset + query.limit)
    rows = run.episodes.rows()
    kept = [r for r in rows if query.keeps(r)]
    if query.sort != "index" or query.descending:
        present = [r for r in kept if getattr(r, query.sort) is not None]
        absent = [r for r in kept if getattr(r, query.sort) is None]
        present.sort(key=lambda r: getattr(r, query.sort), reverse=query.descending)
        kept = present + absent
    page = kept[query.offset : query.offset + query.limit]
    return {
        "rows": [asdict(r) for r in page],
        "matching": len(kept),
        "indexed": len(rows),
        "complete": not run.episodes.scanning,
        "errors": sorted({r.error for r in rows if r.error is not None}),
        "notices": [asdict(n) for n in run.notices()],
    }


def episode_detail(run: Run, index: int, tokenizers: TokenizerLookup) -> dict[str, Any]:
    """One episode token by token: each token's text, kind and rollout logprob, its turns
    (reply, the env's answer, the step's reward), timings, error and logs."""
    run.refresh()
    run.episodes.wait_for(index + 1)
    if not 0 <= index < len(run.episodes):
        raise IndexError(f"run {run.name} has no episode {index}")
    value = run.episodes.read(index)
    notices = []
    try:
        Trajectory.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        notices.append(
            f"this line does not match the current Trajectory format "
            f"({'.'.join(map(str, first['loc']))}: {first['msg']}); shown as far as it reads"
        )
    config, _ = run.config()
    chat, why = tokenizers.find(run.directory, config.get("model"))
    if why:
        notices.append(why)
    tokens: list[int] = value["tokens"]
    mask: list[int] = value["loss_mask"]
    kinds = token_kinds(tokens, mask, chat)
    return {
        "index": index,
        "run": run.id,
        "run_name": run.name,
        "line": run.episodes.line_number(index),
        "task_id": value.get("task_id"),
        "env": value.get("env"),
        "sample": value.get("sample", 0),
        "reward": value.get("reward"),
        "score": value.get("score"),
        "terminated": value.get("terminated"),
        "truncated": value.get("truncated"),
        "num_turns": value.get("num_turns"),
        "error": value.get("error"),
        "timings": value.get("timings"),
        "extra_logs": value.get("extra_logs", {}),
        "tokens": tokens,
        "pieces": pieces(chat, tokens),
        "kinds": kinds,
        "loss_mask": mask,
        "logprobs": value.get("logprobs", [0.0] * len(tokens)),
        "policy_versions": value.get("policy_versions"),
        "turns": _turns(kinds, value.get("step_rewards", [])),
        "notices": notices,
    }


def _turns(kinds: list[Any], step_rewards: list[float]) -> list[dict[str, Any]]:
    """Each reply (the model's or a typed one) with the env's answer after it and its reward."""
    turns: list[dict[str, Any]] = []
    for segment in segments(kinds):
        if segment.kind in ("model", "human"):
            n = len(turns)
            turns.append(
                {
                    "reply": [segment.start, segment.end],
                    "kind": segment.kind,
                    "answer": None,
                    "reward": step_rewards[n] if n < len(step_rewards) else None,
                }
            )
        elif segment.kind == "env" and turns and turns[-1]["answer"] is None:
            turns[-1]["answer"] = [segment.start, segment.end]
    return turns


def curves(run: Run) -> dict[str, Any]:
    """Every numeric series of the run: each `metrics.jsonl` key by learner step, and each
    episode's reward, generated tokens and turns by episode (eval runs have only those)."""
    run.refresh()
    run.metrics.wait_for(1 << 62, timeout=5.0)
    series: dict[str, dict[str, Any]] = {}
    for n, record in enumerate(run.metrics.rows()):
        x = record.get("step", float(n))
        for key, y in record.items():
            if key == "step":
                continue
            entry = series.setdefault(key, {"x": [], "y": [], "xlabel": "learner step"})
            entry["x"].append(x)
            entry["y"].append(y)
    rows = run.episodes.rows()
    for key, column in (
        ("episode/reward", "reward"),
        ("episode/generated_tokens", "generated"),
        ("episode/turns", "turns"),
    ):
        if rows:
            series[key] = {
                "x": [r.index for r in rows],
                "y": [getattr(r, column) for r in rows],
                "xlabel": "episode (file order)",
            }
    complete = not run.episodes.scanning
    return {"run": run.id, "name": run.name, "series": series, "complete": complete}


def tasks(run: Run) -> dict[str, Any]:
    """Each task's episodes (their indexes), for picking the same task in two runs."""
    run.refresh()
    by_task: dict[str, list[int]] = {}
    for row in run.episodes.rows():
        by_task.setdefault(row.task_id, []).append(row.index)
    return {"run": run.id, "tasks": by_task, "complete": not run.episodes.scanning}
