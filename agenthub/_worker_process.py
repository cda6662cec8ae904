"""Worker processes agenthub starts itself as `python -m MODULE PARENT_PID ...`: the math
verifier's hard-killable checks and reward files' functions, which want a main thread.

A plain subprocess rather than `multiprocessing`: spawning through multiprocessing imports the
caller's `__main__` again in each worker, which runs a user's script without a main guard a
second time (and fails there).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


def start_worker(module: str, *args: str) -> subprocess.Popen[bytes]:
    """Start `python -m module PARENT_PID *args` with pipes on its stdin and stdout; its stderr
    is this process's. Whichever thread calls, the worker is started by one thread that lasts
    as long as this process (see `_Spawner`), so it dies with this process and only then."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": _PACKAGE_ROOT + (os.pathsep + path if path else "")}
    argv = [sys.executable, "-m", module, str(os.getpid()), *args]
    return _SPAWNER.start(argv, env)


class _Spawner:
    """The thread every worker is started from.

    Linux's parent-death signal, which a worker arms first thing (`become_worker`), comes when
    the *thread* that started it exits, not its process: a worker started from a pool thread
    that idles out would be killed then. One long-lived thread starting them all ties each
    worker's life to this process's, and the signal needs nothing of the worker's own threads,
    so it also ends a worker whose code holds the GIL and never lets a watcher run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[
            tuple[list[str], dict[str, str], concurrent.futures.Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        done: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        with self._lock:
            # After a fork the child has no threads but this one: its spawner starts afresh.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="agenthub-worker-spawner", daemon=True
                )
                self._thread.start()
            self._jobs.put((argv, env, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            argv, env, done = self._jobs.get()
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
                )
            except BaseException as exc:  # the caller raises it, as Popen would have
                done.set_exception(exc)
            else:
                done.set_result(proc)


_SPAWNER = _Spawner()


def kill_worker(proc: subprocess.Popen[bytes]) -> None:
    """Kill a worker, reap it and close the pipes to it."""
    proc.kill()
    proc.wait()
    close_pipes(proc)


def close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            with contextlib.suppress(OSError):
                pipe.close()


def become_worker() -> BinaryIO:
    """In a worker: die with the parent, ignore Ctrl-C (the parent decides when workers stop),
    and keep stdout for the replies, which go to the returned file: stray prints of the work go
    to stderr.

    A worker dies with its parent by Linux's parent-death signal (its parent starts every
    worker from one thread that lives as long as it does), elsewhere by a thread that looks
    for the parent every second; either way also at the end of its input."""
    parent = int(sys.argv[1])
    if not _die_with_parent(parent):
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    return replies


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(0)


def _die_with_parent(parent_pid: int) -> bool:
    """Arm Linux's parent-death signal; False where it could not be armed."""
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            pr_set_pdeathsig = 1
            armed = ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL) == 0
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(0)
    return armed
