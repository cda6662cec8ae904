"""`Run`: one run directory of `agenthub eval` or `agenthub train`, or a REPL `:save` file,
read as the files are (an older format, a run still writing) with notices for what is off."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from agenthub.view._lines import JsonLines, Notice

__all__ = ["EpisodeRow", "Run", "RunKind", "episode_row", "metrics_row"]

RunKind = Literal["eval", "train", "saved", "unknown"]

TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
EVAL = "eval.json"
CONFIG = "config.json"
STATE = "checkpoints/state.json"
LIVE_S = 120.0  # a run whose files changed this recently is shown as going
OVERVIEW_WAIT_S = 1.0


@dataclass(frozen=True)
class EpisodeRow:
    """One episode's columns in the table (what sorting and filtering need, not its tokens)."""

    index: int
    task_id: str
    sample: int
    reward: float
    score: float | None
    error: str | None
    turns: int
    tokens: int
    generated: int
    policy_version: int | None
    terminated: bool
    truncated: bool


def episode_row(value: Any, index: int = 0) -> EpisodeRow:
    """The table's columns of one trajectory line; `ValueError` for a line that is none. Older
    lines lacking the newer optional fields (`sample`, `score`) still read."""
    if not isinstance(value, dict):
        raise ValueError("a JSON object was expected")
    mask = value["loss_mask"]
    versions = value.get("policy_versions") or [None]
    error = value.get("error")
    return EpisodeRow(
        index=index,
        task_id=str(value["task_id"]),
        sample=int(value.get("sample", 0)),
        reward=float(value["reward"]),
        score=None if value.get("score") is None else float(value["score"]),
        error=str(error.get("cause")) if isinstance(error, dict) else None,
        turns=int(value.get("num_turns", 0)),
        tokens=len(value["tokens"]),
        generated=int(sum(mask)),
        policy_version=max((v for v in versions if v is not None), default=None),
        terminated=bool(value.get("terminated")),
        truncated=bool(value.get("truncated")),
    )


def metrics_row(value: Any, index: int = 0) -> dict[str, float]:
    """The numbers of one `metrics.jsonl` record."""
    if not isinstance(value, dict):
        raise ValueError("a JSON object was expected")
    return {
        k: float(v)
        for k, v in value.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


class Run:
    """What the view shows of one run. Files are read when asked for, the large ones through
    `JsonLines`, so a run still writing shows its new lines on the next request."""

    def __init__(self, run_id: int, path: Path) -> None:
        self.id = run_id
        self.path = path
        self.name = path.name if path.name else str(path)
        self.kind: RunKind = _kind(path)
        trajectories = path if self.kind == "saved" else path / TRAJECTORIES
        self.episodes: JsonLines[EpisodeRow] = JsonLines(trajectories, episode_row)
        self.metrics: JsonLines[dict[str, float]] = JsonLines(path / METRICS, metrics_row)

    @property
    def directory(self) -> Path | None:
        return None if self.kind == "saved" else self.path

    def refresh(self) -> None:
        self.episodes.refresh()
        self.metrics.refresh()

    def config(self) -> tuple[dict[str, Any], list[Notice]]:
        """The run's settings: eval.json for an eval, config.json for training."""
        if self.kind == "saved":
            return {}, []
        if self.kind == "unknown":
            why = (
                f"no {EVAL} or {CONFIG}: a run directory of an older agenthub, or of another "
                "tool; its files are shown as they are"
            )
            return {}, [Notice(self.name, why)]
        value, notices = _read_json(self.path / (EVAL if self.kind == "eval" else CONFIG))
        return (value if isinstance(value, dict) else {}), notices

    def overview(self) -> dict[str, Any]:
        """The runs page's card: config, env, model, summary, live state, notices."""
        self.refresh()
        # A small file is read by now; a large one shows what is indexed, marked as going on.
        self.episodes.wait_for(1 << 62, timeout=OVERVIEW_WAIT_S)
        self.metrics.wait_for(1 << 62, timeout=OVERVIEW_WAIT_S)
        config, notices = self.config()
        summary: Any = None
        if self.kind == "eval" and (self.path / SUMMARY).exists():
            summary, more = _read_json(self.path / SUMMARY)
            notices += more
        rows = self.episodes.rows()
        first_row = rows[0] if rows else None
        env = config.get("env") or (self._first_env() if first_row else None)
        return {
            "id": self.id,
            "name": self.name,
            "path": str(self.path),
            "kind": self.kind,
            "env": env,
            "model": config.get("model"),
            "config": config,
            "summary": summary,
            "episodes": _episode_summary(rows),
            "indexing": self.episodes.scanning,
            "train": self._train_state() if self.kind == "train" else None,
            "live": self._live(),
            "notices": [asdict(n) for n in notices + self.notices()],
        }

    def notices(self) -> list[Notice]:
        return self.episodes.notices() + self.metrics.notices()

    def _first_env(self) -> str | None:
        try:
            return str(self.episodes.read(0).get("env"))
        except (IndexError, ValueError, OSError):
            return None

    def _train_state(self) -> dict[str, Any]:
        metrics = self.metrics.rows()
        last = metrics[-1] if metrics else {}
        state, _ = _read_json(self.path / STATE) if (self.path / STATE).exists() else (None, [])
        return {
            "steps_logged": len(metrics),
            "last": last,
            "checkpoint": state,
        }

    def _live(self) -> dict[str, Any] | None:
        """When the run's files last changed, and whether that is recent enough to be going
        (an eval writes its summary last: one newer than its episodes has finished)."""
        files = [self.path] if self.kind == "saved" else [self.path / f for f in _WATCHED]
        times = {f.name: f.stat().st_mtime for f in files if f.exists()}
        if not times:
            return None
        age = time.time() - max(times.values())
        ended = times.get(SUMMARY, 0.0) >= times.get(TRAJECTORIES, float("inf"))
        return {"updated_s_ago": round(age, 1), "going": age < LIVE_S and not ended}


_WATCHED = (TRAJECTORIES, METRICS, SUMMARY, STATE)


def _kind(path: Path) -> RunKind:
    if path.is_file():
        return "saved"
    if (path / EVAL).exists():
        return "eval"
    if (path / "checkpoints").is_dir():
        return "train"
    if (path / CONFIG).exists():
        config, _ = _read_json(path / CONFIG)
        if isinstance(config, dict) and "env" in config and "model_type" not in config:
            return "train"
    return "unknown"


def _read_json(path: Path) -> tuple[Any, list[Notice]]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), []
    except FileNotFoundError:
        return None, [Notice(path.name, "missing")]
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [Notice(path.name, f"not JSON ({exc}); left out")]


def _episode_summary(rows: list[EpisodeRow]) -> dict[str, Any]:
    """What the episodes read so far add up to (a run going has no summary.json yet)."""
    n = len(rows)
    errors = Counter(r.error for r in rows if r.error is not None)
    counted = [0.0 if r.error else r.reward for r in rows]
    return {
        "count": n,
        "tasks": len({r.task_id for r in rows}),
        "mean_reward": sum(counted) / n if n else None,
        "errors": dict(errors),
        "generated_tokens": sum(r.generated for r in rows),
    }
