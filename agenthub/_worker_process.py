"""Worker processes agenthub starts itself as `python -m MODULE PARENT_PID ...`: the math
verifier's hard-killable checks and reward files' functions, which want a main thread.

A plain subprocess rather than `multiprocessing`: spawning through multiprocessing imports the
caller's `__main__` again in each worker, which runs a user's script without a main guard a
second time (and fails there).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
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
    is this process's."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": _PACKAGE_ROOT + (os.pathsep + path if path else "")}
    return subprocess.Popen(
        [sys.executable, "-m", module, str(os.getpid()), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


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


def become_worker(*, death_signal: bool = True) -> BinaryIO:
    """In a worker: die with the parent, ignore Ctrl-C (the parent decides when workers stop),
    and keep stdout for the replies, which go to the returned file: stray prints of the work go
    to stderr.

    A worker dies with its parent by Linux's parent-death signal (`death_signal`), else by a
    thread that looks for the parent every second; both also end at the end of their input.
    Linux sends the signal when the *thread* that started the worker exits, so it is only for
    workers started by threads that last as long as their process."""
    parent = int(sys.argv[1])
    if death_signal:
        _die_with_parent(parent)
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    return replies


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(0)


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(0)
