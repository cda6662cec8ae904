"""Reward files written for OpenRLHF, called as OpenRLHF calls them.

A file's `reward_func` runs in worker processes (each importing the file once) and in their
main thread, as it does in OpenRLHF's Ray workers: libraries that time out with
`signal.alarm`, math-verify among them, refuse any other thread; CPU-heavy scoring runs beside
the rollouts rather than under their GIL; and an event loop is never blocked. A hung worker is
killed when the process exits, before Python waits for its threads.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  (before the exit hook is registered: see there)
import functools
import inspect
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import anyio

from agenthub._errors import RewardFuncError
from agenthub._tracebacks import RemoteTraceback
from agenthub._worker_process import kill_worker, start_worker
from agenthub.envs import _openrlhf
from agenthub.envs._files import import_user_file
from agenthub.envs.reward_func._output import RewardOutput, parse_reward_output

DEFAULT_PROCESSES = min(4, os.cpu_count() or 1)
"""Worker processes per reward file unless told otherwise."""

_loaded: dict[tuple[Path, int], Callable[..., Any]] = {}
_load_lock = threading.Lock()


def load_reward_func(path: str | Path, *, processes: int | None = None) -> RewardFunction:
    """Load `reward_func` from a Python file written for OpenRLHF, unmodified.

    It is called in `processes` worker processes (default `DEFAULT_PROCESSES`), shared by
    every `RewardFunction` of the file in this process; 0 calls it in a thread of this process
    instead, for a function that must share state with it. The file is also imported here once
    (again if it changes on disk), so a broken file fails now, naming its error.
    """
    if processes is not None and processes < 0:
        raise RewardFuncError(f"processes={processes}: give 0 (a thread) or more worker processes")
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise RewardFuncError(f"reward function file {path} does not exist")
    if not path.is_file():
        raise RewardFuncError(f"reward function file {path} is not a regular file; give a .py file")
    key = (path, path.stat().st_mtime_ns)
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = import_reward_func(path)
    workers = DEFAULT_PROCESSES if processes is None else processes
    return RewardFunction(_loaded[key], name=str(path), file=key, processes=workers)


def import_reward_func(path: Path) -> Callable[..., Any]:
    _openrlhf.install(agent=False)  # OpenRLHF's math reward example imports its math utilities
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
    """An OpenRLHF-style batch reward function: a callable, called in a worker thread, or a
    reward file's (see `load_reward_func`), called in worker processes.

    `queries` are prompt + response texts, `prompts` the rendered prompts, `labels` the tasks'
    labels. The older two-argument form `reward_func(queries, prompts)` is detected and called
    without labels; `takes_labels` says which form this is.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        file: tuple[Path, int] | None = None,
        processes: int = 0,
    ) -> None:
        self.func = func
        self.name = name or getattr(func, "__qualname__", repr(func))
        if inspect.iscoroutinefunction(func):
            raise RewardFuncError(
                f"reward function {self.name} is `async def`; OpenRLHF's reward_func is a plain "
                "`def` returning rewards (agenthub calls it off the event loop, in worker "
                "processes for a file): drop the `async` and call async code with asyncio.run"
            )
        self.takes_labels = _takes_labels(func)
        self._file = file
        self._processes = processes

    @property
    def processes(self) -> int:
        """Worker processes calling the function; 0 when it is called in a thread."""
        return self._processes if self._file is not None else 0

    def __call__(
        self,
        queries: list[str],
        prompts: list[str],
        labels: list[Any],
        *,
        sample_names: list[str] | None = None,
    ) -> RewardOutput:
        return self._score(queries, prompts, labels, sample_names, _Call())

    async def ascore(
        self,
        queries: list[str],
        prompts: list[str],
        labels: list[Any],
        *,
        sample_names: list[str] | None = None,
    ) -> RewardOutput:
        """Score off the event loop, so a slow function never stalls other episodes. Cancelled
        (an episode's step timeout, say), a call in a worker process kills that worker; one in
        a thread runs on, unwatched."""
        call = _Call()
        score = functools.partial(self._score, queries, prompts, labels, sample_names, call)
        try:
            return await anyio.to_thread.run_sync(score, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            call.cancel()
            raise

    def _score(
        self,
        queries: list[str],
        prompts: list[str],
        labels: list[Any],
        sample_names: list[str] | None,
        call: _Call,
    ) -> RewardOutput:
        args: tuple[Any, ...] = (
            (queries, prompts, labels) if self.takes_labels else (queries, prompts)
        )
        samples = sample_names or [_excerpt(q) for q in queries]
        try:
            if self._file is None or not self._processes:
                raw = self.func(*args)
            else:
                raw = _workers(self._file, self._processes).call(args, call)
        except _WorkerDied as died:
            raise RewardFuncError(
                f"reward function {self.name}: the worker process scoring {', '.join(samples)} "
                f"{died}"
            ) from None
        except Exception as exc:
            hint = ""
            if self._file is not None and not self._processes and "thread" in str(exc):
                hint = "; it wants the main thread: leave reward_processes unset"
            kind = exc.kind if isinstance(exc, _RaisedInWorker) else type(exc).__name__
            raise RewardFuncError(
                f"reward function {self.name} raised {kind}: {exc} (samples: {samples}){hint}"
            ) from exc
        return parse_reward_output(
            raw,
            len(queries),
            source=f"reward function {self.name}",
            samples=samples,
            error=RewardFuncError,
        )


# -- worker processes ---------------------------------------------------------------------


class _WorkerDied(Exception):
    """A worker process ended while it owed a reply; the message says how."""


_DIED = (
    "The next call starts a new one; if it dies too, call the function by hand to see what kills it"
)


class _Call:
    """One call in a worker process, which its caller may cancel from another thread: the
    worker it holds is killed (its slot is free again), or it takes none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self.cancelled = False

    def hold(self, worker: _Worker) -> bool:
        """Record the worker the call runs on; False, leaving it alone, if the call was
        cancelled already."""
        with self._lock:
            if not self.cancelled:
                self._worker = worker
            return not self.cancelled

    def release(self) -> bool:
        """The call is over: a later `cancel` leaves its worker alone (it may serve another
        call by then). False if it was cancelled, and so its worker perhaps killed."""
        with self._lock:
            self._worker = None
            return not self.cancelled

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._worker is not None:
                self._worker.proc.kill()  # the reader sees the end of its output and frees it


class _RaisedInWorker(Exception):
    """`reward_func` raised in a worker: `kind` is its type's name, the message its message;
    the worker's traceback is the cause."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Worker:
    """One `python -m agenthub.envs.reward_func._worker` process, doing one call at a time."""

    def __init__(self, path: Path) -> None:
        self.proc = start_worker("agenthub.envs.reward_func._worker", str(path))
        self._ready = False
        # The file may import what this process can (a script's own directory, say).
        self._send(list(sys.path))

    def call(self, args: tuple[Any, ...]) -> Any:
        if not self._ready:
            ready = self._read()
            if ready[0] == "error":  # the file imports here but not there
                raise _WorkerDied(f"could not import the file: {ready[2]}")
            self._ready = True
        self._send(args)
        return self._answer(self._read())

    def _send(self, value: Any) -> None:
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        try:
            pickle.dump(value, stdin)
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerDied(self._how()) from None

    def _read(self) -> tuple[Any, ...]:
        try:
            reply: tuple[Any, ...] = pickle.load(self.proc.stdout)  # type: ignore[arg-type]
        except (EOFError, OSError, pickle.UnpicklingError):
            raise _WorkerDied(self._how()) from None
        return reply

    @staticmethod
    def _answer(reply: tuple[Any, ...]) -> Any:
        if reply[0] == "error":
            _, kind, message, trace, frames = reply
            raise _RaisedInWorker(kind, message) from RemoteTraceback(trace, frames)
        return reply[1] if len(reply) > 1 else None

    def _how(self) -> str:
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        return f"died (exit code {code}{', killed' if code < 0 else ''}). {_DIED}"

    def kill(self) -> None:
        kill_worker(self.proc)


class _Workers:
    """Up to `size` worker processes for one reward file, started as calls need them; each call
    holds one worker until it answers. A worker that dies is replaced by the next call."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def call(self, args: tuple[Any, ...], call: _Call) -> Any:
        with self._slots:
            with self._lock:
                if self._closed:
                    raise _WorkerDied("was stopped: Python is exiting")
                worker = self._idle.pop() if self._idle else _Worker(self.path)
                self._all.add(worker)
            if not call.hold(worker):
                self._put_back(worker)
                raise _WorkerDied("was stopped: the call was cancelled")
            try:
                result = worker.call(args)
            except _RaisedInWorker:
                self._release(worker, call)
                raise
            except _WorkerDied:
                self._discard(worker)
                if call.cancelled or self._closed:
                    why = "the call was cancelled" if call.cancelled else "Python is exiting"
                    raise _WorkerDied(f"was stopped: {why}") from None
                raise
            except BaseException:  # cut off mid-reply: it cannot be trusted again
                self._discard(worker)
                raise
            self._release(worker, call)
            return result

    def _release(self, worker: _Worker, call: _Call) -> None:
        if call.release():  # else the call was cancelled, and its worker may be dying
            self._put_back(worker)
        else:
            self._discard(worker)

    def _put_back(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed and worker.proc.poll() is None:
                self._idle.append(worker)
                return
        self._discard(worker)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    def close(self) -> None:
        """Kill every worker, busy ones too: a call waiting on one ends with `_WorkerDied`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._all.difference(idle)
            self._all.clear()
        for worker in idle:
            worker.kill()
        for worker in busy:  # its caller reads the end of its output, then closes it
            worker.proc.kill()


_pools: dict[tuple[Path, int, int], _Workers] = {}
"""(file, its mtime, processes) -> the workers. A file changed during a run gets workers of
its own; episodes that loaded the older version finish on theirs."""
_pools_lock = threading.Lock()


def _workers(file: tuple[Path, int], processes: int) -> _Workers:
    path, mtime_ns = file
    with _pools_lock:
        key = (path, mtime_ns, processes)
        if key not in _pools:
            _pools[key] = _Workers(path, processes)
        return _pools[key]


def _close_all() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for workers in pools:
        workers.close()


# Python waits for its threads before atexit handlers run, and a thread waiting on a worker
# stuck in a reward function never ends; hooks registered here run before that wait, the
# latest first: after the thread executor's (imported above for that), whose hook waits for
# its threads, one of which may be waiting on a worker.
threading._register_atexit(_close_all)  # type: ignore[attr-defined]


def _excerpt(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit // 2] + " … " + flat[-limit // 2 :])
