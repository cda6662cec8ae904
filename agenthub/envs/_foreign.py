"""What every adapter to another hub's environments shares: importing the foreign package
lazily behind its extra, and turning the package's failures into errors that name it."""

from __future__ import annotations

import importlib
import importlib.util
import random
import socket
import threading
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import anyio.to_thread
import numpy as np

from agenthub._errors import AgentHubError

T = TypeVar("T")

_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    socket.gaierror,
    ConnectionError,
    TimeoutError,
    urllib.error.URLError,
)
# Names of the network errors of libraries we do not import (requests, httpx, aiohttp).
_NETWORK_ERROR_NAMES = {"ConnectError", "ConnectTimeout", "ConnectionError", "ClientConnectorError"}


class ForeignEnvError(AgentHubError, RuntimeError):
    """A foreign environment failed; the message names its package and what it was doing.
    Raised from `reset` or `step`, it ends that episode as an `env_error`, never the run."""


class MissingExtraError(AgentHubError, ImportError):
    """An adapter's foreign package is not installed."""


def import_foreign(module: str, *, env: str, extra: str) -> ModuleType:
    """Import `module` for the `env` adapter, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there, one of its own imports is not: show that
        raise MissingExtraError(
            f"the {env} env needs the {module.split('.')[0]} package: "
            f"pip install 'agenthub[{extra}]'"
        ) from None


def foreign_failure(package: str, what: str, exc: BaseException) -> ForeignEnvError:
    """A `ForeignEnvError` saying that `package` failed while doing `what`, and that it needed
    the network where the failure was one (this machine may have none)."""
    detail = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    if needs_network(exc):
        return ForeignEnvError(
            f"{package} could not reach the network while {what} ({detail}): an env that "
            "downloads data when it runs needs a machine with network, or its data installed "
            "beforehand; one that talks to a server needs that server up"
        )
    return ForeignEnvError(f"{package} raised while {what}: {detail}")


def needs_network(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is a failed network access, or
    nltk's missing-resource error (its corpora are downloaded when first used)."""
    for cause in _chain(exc):
        if isinstance(cause, _NETWORK_ERRORS) or type(cause).__name__ in _NETWORK_ERROR_NAMES:
            return True
        if isinstance(cause, LookupError) and "nltk.download" in str(cause):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


async def call_foreign(
    package: str, what: str, call: Callable[[], T], *, lock: threading.Lock | None = None
) -> T:
    """Run the foreign library's blocking `call` on a worker thread (under `lock` when one is
    given, for libraries with process-wide state) and raise its failure as a
    `ForeignEnvError` naming `package` and `what` it was doing."""

    def run() -> T:
        if lock is None:
            return call()
        with lock:
            return call()

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=False)
    except (Exception, SystemExit) as exc:
        raise foreign_failure(package, what, exc) from exc


class OwnRandom:
    """Python's and numpy's global random generators, as one foreign game sees them.

    Libraries like TextArena and gem seed and draw from the process-wide `random` and
    `np.random`; episodes of many games share one process, so each game's calls run through
    its own `OwnRandom`, one at a time, each from the state the game's last call left."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self._state: tuple[Any, Any] | None = None

    def run(self, call: Callable[[], T]) -> T:
        with OwnRandom._lock:
            outside = random.getstate(), np.random.get_state()
            if self._state is not None:
                random.setstate(self._state[0])
                np.random.set_state(self._state[1])
            try:
                return call()
            finally:
                self._state = random.getstate(), np.random.get_state()
                random.setstate(outside[0])
                np.random.set_state(outside[1])


HELD_OUT_SEED_OFFSET = 1_000_003
"""Games have no task lists: split `train` is `num_tasks` games seeded `seed + i`, split
`held_out` the same seeded `seed + 1_000_003 + i`."""


def game_seeds(split: str, *, seed: int, num_tasks: int, env: str) -> range:
    """The game seeds of `split` for an adapter whose tasks differ by seed alone."""
    if split not in ("train", "held_out"):
        raise ValueError(f"{env} has the splits 'train' and 'held_out', not {split!r}")
    first = seed + (HELD_OUT_SEED_OFFSET if split == "held_out" else 0)
    return range(first, first + num_tasks)


# What in an environment's source means it needs the network when it runs: nltk's corpora
# (downloaded on first use), word lists built on them, datasets loaded from a hub, plain
# downloads, and a game master that is a hosted model (OpenRouter).
_NETWORK_MARKERS = (
    "nltk",
    "word_lists",
    "load_dataset",
    "requests.get",
    "urlopen",
    "OpenRouterAgent",
)


def module_source(module: str) -> str:
    """The source of `module` read from its file, without importing it or its package
    (importing some environments starts a download); "" where there is no such file."""
    top = importlib.util.find_spec(module.split(".")[0])
    if top is None or not top.submodule_search_locations:
        return ""
    root = Path(next(iter(top.submodule_search_locations))).parent
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def source_needs_network(source: str) -> bool:
    """Whether an environment's source shows that it reaches the network when it runs."""
    return any(marker in source for marker in _NETWORK_MARKERS)
