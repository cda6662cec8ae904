from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from agenthub._errors import RewardFuncError
from agenthub.envs._files import import_user_file
from agenthub.envs.reward_func._output import RewardOutput, parse_reward_output

_loaded: dict[tuple[Path, int], Callable[..., Any]] = {}
_load_lock = threading.Lock()


def load_reward_func(path: str | Path) -> RewardFunction:
    """Load `reward_func` from a Python file written for OpenRLHF, unmodified.

    The file is imported once per process (again if it changes on disk).
    """
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise RewardFuncError(f"reward function file {path} does not exist")
    if not path.is_file():
        raise RewardFuncError(f"reward function file {path} is not a regular file; give a .py file")
    key = (path, path.stat().st_mtime_ns)
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = _import_reward_func(path)
    return RewardFunction(_loaded[key], name=str(path))


def _import_reward_func(path: Path) -> Callable[..., Any]:
    module = import_user_file(path, kind="reward function", error=RewardFuncError)
    func = getattr(module, "reward_func", None)
    if not callable(func):
        raise RewardFuncError(
            f"{path} defines no function 'reward_func'; define "
            "reward_func(queries, prompts, labels) returning {'rewards': ...} or a list"
        )
    return func  # type: ignore[no-any-return]


def _takes_labels(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)


class RewardFunction:
    """An OpenRLHF-style batch reward function, called in a worker thread.

    `queries` are prompt + response texts, `prompts` the rendered prompts, `labels` the tasks'
    labels. The older two-argument form `reward_func(queries, prompts)` is detected and called
    without labels; `takes_labels` says which form this is.
    """

    def __init__(self, func: Callable[..., Any], *, name: str | None = None) -> None:
        self.func = func
        self.name = name or getattr(func, "__qualname__", repr(func))
        self.takes_labels = _takes_labels(func)

    def __call__(
        self,
        queries: list[str],
        prompts: list[str],
        labels: list[Any],
        *,
        sample_names: list[str] | None = None,
    ) -> RewardOutput:
        args: tuple[Any, ...] = (
            (queries, prompts, labels) if self.takes_labels else (queries, prompts)
        )
        samples = sample_names or [_excerpt(q) for q in queries]
        try:
            raw = self.func(*args)
        except Exception as exc:
            raise RewardFuncError(
                f"reward function {self.name} raised {type(exc).__name__}: {exc} "
                f"(samples: {samples})"
            ) from exc
        return parse_reward_output(
            raw,
            len(queries),
            source=f"reward function {self.name}",
            samples=samples,
            error=RewardFuncError,
        )

    async def ascore(
        self,
        queries: list[str],
        prompts: list[str],
        labels: list[Any],
        *,
        sample_names: list[str] | None = None,
    ) -> RewardOutput:
        """Score off the event loop, so a slow function never stalls other episodes."""
        return await anyio.to_thread.run_sync(
            functools.partial(self, queries, prompts, labels, sample_names=sample_names)
        )


def _excerpt(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit // 2] + " … " + flat[-limit // 2 :])
